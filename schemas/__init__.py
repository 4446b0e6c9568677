"""Every table's StructType, its status enum and its DDL properties."""
