"""Device compute for docembed: pure JAX, no Ray, no storage."""
