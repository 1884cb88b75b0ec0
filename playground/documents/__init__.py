"""The session as a document: File > New, Open, Save, Save as and Recent sessions; the autosave, hot exit and crash
recovery (autosave.py says where the files are)."""
