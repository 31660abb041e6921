"""Sizes of modules and memory budgets per device."""
