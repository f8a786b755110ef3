from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "apps.accounts"
    label = "accounts"
    verbose_name = "Accounts, roles and audit"

    def ready(self) -> None:
        from apps.accounts import wiring

        wiring.connect(self)
