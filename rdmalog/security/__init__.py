"""Who a client is (principals, authentication) and what it may do (authorization)."""
