"""Prepared loaders: `prepare_data_loader` rebuilds a user's DataLoader as a shard, a dispatcher or a
stateful loader; `even_batches` switched on them for a while."""
