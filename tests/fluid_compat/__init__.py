"""Pins of Paddle 1.8 behaviours the runtime reproduces (issue 27), with Paddle's values."""
