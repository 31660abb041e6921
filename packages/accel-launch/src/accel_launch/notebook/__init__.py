"""`notebook_launcher`: a function on N processes from a notebook or a Python session."""
