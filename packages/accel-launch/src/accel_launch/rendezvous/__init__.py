"""A one-machine job's rendezvous, which listens on loopback only, and its free ports."""
