"""Precision policies (fp32, bf16, fp16) and fp16's dynamic loss scaling."""
