"""torch.compile of prepared models: the plugin (Accelerate's `TorchDynamoPlugin`), regional
compilation of repeated blocks, and the on-disk cache that makes a second launch start warm."""
