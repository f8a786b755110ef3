"""Remove DRF authtoken's table where an older Host created it: it holds API keys in plain text.

Those keys stop working with this release (tokens are now ``accounts.ApiToken``, stored hashed);
operators mint new ones with ``manage.py api_token create`` (README, Operating).
"""
from django.db import migrations


def drop_plaintext_tokens(apps, schema_editor):
    connection = schema_editor.connection
    if "authtoken_token" in connection.introspection.table_names():
        schema_editor.execute(f"DROP TABLE {schema_editor.quote_name('authtoken_token')}")


class Migration(migrations.Migration):
    dependencies = [("accounts", "0002_roles")]

    operations = [migrations.RunPython(drop_plaintext_tokens, migrations.RunPython.noop)]
