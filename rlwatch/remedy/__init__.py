"""What changes the host: the actions and their safety rules, the watchdog's policies, restart budgets and
state, and the service that keeps the watchdog alive."""
