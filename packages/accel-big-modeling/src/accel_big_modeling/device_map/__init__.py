"""Device maps: inferring, balancing and checking them."""
