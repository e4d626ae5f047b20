"""Token ids into embeddings: the model directory, static batches, the encoder on a device mesh, where
encoder actors run, and the persistent compilation cache."""
