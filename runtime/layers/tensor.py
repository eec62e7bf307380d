"""(placeholder: layers arrive in a later commit)."""
