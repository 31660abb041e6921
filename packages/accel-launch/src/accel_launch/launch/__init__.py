"""From `accel launch`'s options to running workers: checked options, torchrun's arguments, the elastic
agent, the workers' first program."""
