"""A toy store for tests/test_store_driver.py: a driver in a folder of its own."""
