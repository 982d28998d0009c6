"""The pattern matcher: rules written as plain Python functions over ATen ops."""
