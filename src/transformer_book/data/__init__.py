"""Data for the course: Multi30k, BPE tokenization, batching and synthetic toy tasks."""
