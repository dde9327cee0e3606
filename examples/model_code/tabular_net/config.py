"""Defaults the builders share; a request's ``hyperparameters`` override them."""

WIDTH = 32
