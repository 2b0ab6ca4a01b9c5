"""lnrepro: reproduce "On Layer Normalizations and Residual Connections in Transformers" (Takase et al. 2022)."""

__version__ = "0.1.0"
