"""The course around the package: the exercises and their checkers (``exercises``), the
book's figures (``figures``), student assignments, and the cache of chapter 10's model.
"""
