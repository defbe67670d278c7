"""What rlwatch is told: the configuration models and the shipped profiles."""
