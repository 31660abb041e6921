"""`accel merge-weights`: a sharded (DCP) model checkpoint read on the CPU, written as one set of weights."""
