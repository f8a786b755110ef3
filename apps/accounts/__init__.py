"""Who may do what: teams, roles (Django groups of model permissions), hashed API tokens, and the audit
trail of staff writes. Sits just above ``apps.core``; the apps that own work call its selectors to scope
reads and writes by team. See docs/permissions.md."""
