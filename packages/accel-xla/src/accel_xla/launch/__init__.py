"""XLA's launch: its torch-free launch hook, and running a function on every replica."""
