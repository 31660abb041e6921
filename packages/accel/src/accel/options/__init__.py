"""What an `Accelerator` is configured with: Accelerate's kwargs handlers and configurations, and
how they (and the launcher's variables) become the options of the state, precision and backend."""
