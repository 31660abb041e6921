"""Orders that are the same on every rank and replayable: seedable and synchronized samplers, RNG
sync, and a batch sampler that starts at batch n."""
