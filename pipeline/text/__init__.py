"""Text into token windows: the model's tokenizer and chunking."""
