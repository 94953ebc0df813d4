"""The Transformer, step by step: the package behind the course.

Each idea of *Attention Is All You Need* (Vaswani et al., 2017) has one module here;
the chapters in ``notebooks/`` import them and check their own from-scratch versions
against them.
"""

__version__ = "0.1.0"
