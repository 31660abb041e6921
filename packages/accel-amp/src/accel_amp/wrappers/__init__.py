"""The user's optimizer and scheduler, wrapped to step only on real (sync) steps."""
