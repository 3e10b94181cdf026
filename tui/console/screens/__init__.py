"""The console's screens, one per mode: dashboard, launch, bench, results, campaign, playbook."""
