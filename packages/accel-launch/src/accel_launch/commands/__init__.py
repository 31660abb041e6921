"""The `accel` command line: the click group, its commands, and the text of `accel env`."""
