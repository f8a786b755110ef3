from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("accounts", "0003_drop_plaintext_authtoken")]

    operations = [
        migrations.AlterField(
            model_name="auditevent",
            name="via",
            field=models.CharField(choices=[("api", "API"), ("admin", "Django admin"), ("page", "staff page"),
                                            ("command", "manage.py command")], max_length=10),
        ),
    ]
