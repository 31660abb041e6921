"""What a run asks of DeepSpeed: the plugin, one config from four places, its errors, the optimizer
sections."""
