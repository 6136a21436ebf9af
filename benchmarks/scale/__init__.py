"""Models of realistic size: run.py measures each analysis's peak memory and time on random
Hugging Face folders (calls, child, peak, shapes, table are its parts)."""
