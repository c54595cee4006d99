"""Project/region/zone resolution: flag, then environment, then the active gcloud configuration."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from gcpgpu import settings as settings_module
from gcpgpu.cli import main
from gcpgpu.errors import UsageProblem
from gcpgpu.settings import Settings, parse_emulator, region_of_zone


def write_gcloud_config(config_dir: Path, name: str = "default", **sections: dict[str, str]) -> Path:
    """Write configurations/config_<name> the way gcloud does, e.g. core={"project": "proj-p"}."""
    path = config_dir / "configurations" / f"config_{name}"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for section, values in sections.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {value}" for key, value in values.items()]
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


# --- project -------------------------------------------------------------------------------


def test_project_flag_beats_env_and_gcloud(isolated_gcloud, monkeypatch):
    write_gcloud_config(isolated_gcloud, core={"project": "from-gcloud"})
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "from-env")
    settings = Settings(project_flag="from-flag")
    assert settings.project == "from-flag"
    assert settings.source("project") == "flag"


def test_project_env_beats_gcloud(isolated_gcloud, monkeypatch):
    write_gcloud_config(isolated_gcloud, core={"project": "from-gcloud"})
    monkeypatch.setenv("CLOUDSDK_CORE_PROJECT", "from-env")
    assert Settings().project == "from-env"


def test_google_cloud_project_beats_cloudsdk_core_project(monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "google-one")
    monkeypatch.setenv("CLOUDSDK_CORE_PROJECT", "cloudsdk-one")
    assert Settings().project == "google-one"


def test_empty_env_var_is_skipped(monkeypatch):
    # `export GOOGLE_CLOUD_PROJECT=` must not shadow the next source with an empty project.
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "")
    monkeypatch.setenv("CLOUDSDK_CORE_PROJECT", "cloudsdk-one")
    assert Settings().project == "cloudsdk-one"


def test_project_from_default_gcloud_config(isolated_gcloud):
    write_gcloud_config(isolated_gcloud, core={"project": "from-gcloud", "account": "me@example.com"})
    settings = Settings()
    assert settings.project == "from-gcloud"
    assert settings.source("project") == "gcloud"


def test_active_config_file_selects_configuration(isolated_gcloud):
    write_gcloud_config(isolated_gcloud, "default", core={"project": "default-project"})
    write_gcloud_config(isolated_gcloud, "work", core={"project": "work-project"})
    (isolated_gcloud / "active_config").write_text("work\n", encoding="utf-8")
    assert Settings().project == "work-project"


def test_cloudsdk_active_config_name_selects_configuration(isolated_gcloud, monkeypatch):
    write_gcloud_config(isolated_gcloud, "work", core={"project": "work-project"})
    write_gcloud_config(isolated_gcloud, "lab", core={"project": "lab-project"})
    (isolated_gcloud / "active_config").write_text("work", encoding="utf-8")
    monkeypatch.setenv("CLOUDSDK_ACTIVE_CONFIG_NAME", "lab")
    assert Settings().project == "lab-project"


def test_cloudsdk_config_points_at_the_config_dir(tmp_path, monkeypatch):
    other = tmp_path / "elsewhere"
    write_gcloud_config(other, core={"project": "elsewhere-project"})
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(other))
    assert Settings().project == "elsewhere-project"


def test_unreadable_gcloud_config_counts_as_unset(isolated_gcloud):
    path = write_gcloud_config(isolated_gcloud, core={"project": "proj-p"})
    path.write_text("not an ini file\n[core\n", encoding="utf-8")
    assert Settings().optional("project") is None


def test_missing_project_says_how_to_set_it():
    with pytest.raises(UsageProblem) as caught:
        _ = Settings().project
    message = caught.value.format_message()
    assert "\n" not in message
    assert "--project" in message and "GOOGLE_CLOUD_PROJECT" in message
    assert "gcloud config set project" in message
    assert caught.value.exit_code == 2


# --- region and zone -------------------------------------------------------------------------


def test_region_flag_beats_env_beats_gcloud(isolated_gcloud, monkeypatch):
    write_gcloud_config(isolated_gcloud, compute={"region": "asia-east1"})
    assert Settings().region == "asia-east1"
    monkeypatch.setenv("CLOUDSDK_COMPUTE_REGION", "europe-west4")
    assert Settings().region == "europe-west4"
    assert Settings(region_flag="us-east5").region == "us-east5"


def test_zone_flag_beats_env_beats_gcloud(isolated_gcloud, monkeypatch):
    write_gcloud_config(isolated_gcloud, compute={"zone": "asia-east1-c"})
    assert Settings().zone == "asia-east1-c"
    monkeypatch.setenv("CLOUDSDK_COMPUTE_ZONE", "europe-west4-b")
    assert Settings().zone == "europe-west4-b"
    assert Settings(zone_flag="us-east5-a").zone == "us-east5-a"


def test_region_derived_from_zone_when_unset(isolated_gcloud):
    write_gcloud_config(isolated_gcloud, compute={"zone": "us-central1-a"})
    settings = Settings()
    assert settings.region == "us-central1"
    assert settings.source("region") == "zone"


def test_zone_flag_overrides_a_weaker_region(isolated_gcloud, monkeypatch):
    # --zone europe-west4-b with a gcloud default region elsewhere means europe-west4.
    write_gcloud_config(isolated_gcloud, compute={"region": "us-central1"})
    assert Settings(zone_flag="europe-west4-b").region == "europe-west4"
    monkeypatch.setenv("CLOUDSDK_COMPUTE_REGION", "us-east1")
    assert Settings(zone_flag="europe-west4-b").region == "europe-west4"


def test_region_as_strong_as_zone_is_kept(monkeypatch):
    monkeypatch.setenv("CLOUDSDK_COMPUTE_REGION", "us-east1")
    monkeypatch.setenv("CLOUDSDK_COMPUTE_ZONE", "us-east1-b")
    assert Settings().region == "us-east1"
    assert Settings().source("region") == "env"


def test_contradicting_region_and_zone_flags_are_refused():
    with pytest.raises(UsageProblem, match=r"--zone us-central1-a is not in --region europe-west4"):
        Settings(region_flag="europe-west4", zone_flag="us-central1-a")


def test_missing_region_and_zone_say_how_to_set_them():
    settings = Settings()
    with pytest.raises(UsageProblem, match=r"gcloud config set compute/region"):
        _ = settings.region
    with pytest.raises(UsageProblem, match=r"gcloud config set compute/zone"):
        _ = settings.zone


@pytest.mark.parametrize(
    ("zone", "region"),
    [("us-central1-a", "us-central1"), ("northamerica-northeast1-b", "northamerica-northeast1"),
     ("me-central2-c", "me-central2"), ("us-central1", None), ("bogus", None)],
)  # fmt: skip
def test_region_of_zone(zone, region):
    assert region_of_zone(zone) == region


# --- laziness --------------------------------------------------------------------------------


def test_nothing_is_read_until_asked(monkeypatch):
    def explode(environ):
        raise AssertionError("the gcloud config was read")

    monkeypatch.setattr(settings_module, "read_gcloud_properties", explode)
    settings = Settings(format="json")  # what the root group builds for every command
    assert settings.format == "json"
    # Flags answer all three without falling through to the gcloud file.
    flagged = Settings(project_flag="proj-p", region_flag="us-central1", zone_flag="us-central1-a")
    assert (flagged.project, flagged.region, flagged.zone) == ("proj-p", "us-central1", "us-central1-a")


def test_commands_that_need_no_project_run_without_one():
    result = CliRunner().invoke(main, ["catalog"])
    assert result.exit_code == 0, result.output


def test_cli_missing_project_exits_2_in_one_line(monkeypatch):
    @click.command("needs-project")
    @click.pass_obj
    def needs_project(settings):
        click.echo(settings.project)

    monkeypatch.setitem(main.commands, "needs-project", needs_project)
    result = CliRunner().invoke(main, ["needs-project"])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "Error: no project set: pass --project, set GOOGLE_CLOUD_PROJECT, or run "
        "'gcloud config set project PROJECT'"
    ]


def test_cli_flags_reach_settings(isolated_gcloud, monkeypatch):
    write_gcloud_config(isolated_gcloud, core={"project": "from-gcloud"}, compute={"zone": "asia-east1-c"})

    @click.command("where")
    @click.pass_obj
    def where(settings):
        click.echo(
            f"{settings.project} {settings.region} {settings.zone} {settings.format} {settings.emulator}"
        )

    monkeypatch.setitem(main.commands, "where", where)
    monkeypatch.setenv("GCPGPU_EMULATOR", "127.0.0.1:8085")
    result = CliRunner().invoke(main, ["--project", "proj-p", "--format", "yaml", "where"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "proj-p asia-east1 asia-east1-c yaml 127.0.0.1:8085"


# --- emulator and clients ----------------------------------------------------------------------


@pytest.mark.parametrize("value", ["127.0.0.1:8085", "localhost:1", "[::1]:65535", "emu_host.local:9000"])
def test_emulator_accepts_host_port(value):
    assert parse_emulator(value) == value


@pytest.mark.parametrize(
    "value", ["8085", "127.0.0.1", "127.0.0.1:0", "host:70000", "http://127.0.0.1:8085", "a b:1"]
)
def test_emulator_rejects_anything_else(value):
    with pytest.raises(UsageProblem, match=r"^--emulator .* is not HOST:PORT"):
        parse_emulator(value)


def test_bad_emulator_env_var_exits_2_naming_the_flag(monkeypatch):
    monkeypatch.setenv("GCPGPU_EMULATOR", "nonsense")
    result = CliRunner().invoke(main, ["catalog"])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "Error: --emulator 'nonsense' is not HOST:PORT (e.g. 127.0.0.1:8085; also read from GCPGPU_EMULATOR)"
    ]


def test_clients_are_built_once_from_settings(monkeypatch):
    built = []

    class FakeClients:
        def __init__(self, *, emulator, project):
            built.append((emulator, project))

    # The real gcpgpu.gcp.clients is another room's; only its name and signature matter here.
    monkeypatch.setitem(sys.modules, "gcpgpu.gcp.clients", types.SimpleNamespace(Clients=FakeClients))
    settings = Settings(project_flag="proj-p", emulator="127.0.0.1:9")
    assert settings.clients is settings.clients
    assert built == [("127.0.0.1:9", "proj-p")]
