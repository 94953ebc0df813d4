"""Small attention models that Part II trains on toy tasks to show what attention learns.

Each lives in its own module and is built from :mod:`transformer_book.attention` and
:mod:`transformer_book.positional`, never re-deriving them.
"""
