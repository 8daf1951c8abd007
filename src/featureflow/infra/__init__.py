"""Local services featureflow starts itself: Maven-fetched jars, the Kafka broker."""
