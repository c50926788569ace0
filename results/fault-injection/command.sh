python scripts/fault_table.py
