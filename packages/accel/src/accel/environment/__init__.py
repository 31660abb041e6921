"""What the machine has: which optional packages and device kinds are there, and the environment
variable helpers of Accelerate's `utils`."""
