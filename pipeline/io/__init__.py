"""Storage: URIs and their redaction, filesystems with retries, listing the inputs, reading shards."""
