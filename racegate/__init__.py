"""racegate: gates a torch or transformers upgrade on a multi-threaded torch.compile training
step."""
