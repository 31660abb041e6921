"""The config file: where it lives, its keys and checks, the effective config with its sources, `accel
config`'s questions."""
