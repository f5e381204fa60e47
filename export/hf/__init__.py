"""Reading a Hugging Face seq2seq checkpoint: its weights and switches, tokenizer and generation settings."""
