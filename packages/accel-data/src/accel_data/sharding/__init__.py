"""Each process's share of the data: of a batch sampler, of an iterable stream, of a batch's rows."""
