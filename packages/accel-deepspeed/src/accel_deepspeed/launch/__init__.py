"""DeepSpeed's launch hook: its flags, config section, checks and env vars (torch-free)."""
