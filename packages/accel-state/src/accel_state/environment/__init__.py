"""What the process finds around it: launch variables, distributed type, device, memory."""
