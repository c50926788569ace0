python tests/fault_table.py
