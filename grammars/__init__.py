"""Lark grammars, one per input format; installed as the package forensics.grammars."""
