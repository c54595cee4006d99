"""The emulator's Artifact Registry answers dockerImages.list as Google's REST API does."""

from __future__ import annotations

import requests
from click.testing import CliRunner

from gcpgpu.cli import main

PROJECT = "emu-test-project"
BASE = "/v1/projects/{p}/locations/{l}/repositories/{r}/dockerImages"


def listing(gcp, repo: str = "gcpgpu", location: str = "us-central1", **params) -> requests.Response:
    return requests.get(gcp.url + BASE.format(p=PROJECT, l=location, r=repo), params=params, timeout=10)


def build(tag: str) -> str:
    result = CliRunner().invoke(main, ["--project", PROJECT, "--region", "us-central1", "container", "build",
                                       "--flavor", "none", "--tag", tag])
    assert result.exit_code == 0, result.output
    return result.output.strip().splitlines()[-1]


def test_an_unknown_repository_is_404_as_google_says_it(gcp):
    answer = listing(gcp, repo="nothing-here")
    assert answer.status_code == 404
    assert answer.json()["error"]["status"] == "NOT_FOUND"


def test_a_fresh_project_holds_one_seeded_trainer_image_per_flavour(gcp):
    images = listing(gcp).json()["dockerImages"]
    assert sorted(t for i in images for t in i["tags"]) == ["none-emulator", "rdma-emulator", "tcpx-emulator",
                                                           "tcpxo-emulator"]
    one = images[0]
    assert one["uri"].startswith(f"us-central1-docker.pkg.dev/{PROJECT}/gcpgpu/gcpgpu-trainer@sha256:")
    assert one["name"].startswith(f"projects/{PROJECT}/locations/us-central1/repositories/gcpgpu/dockerImages/")
    gcp.artifactregistry.seeded = False
    assert listing(gcp).status_code == 404


def test_pushed_images_are_listed_and_a_pushed_again_tag_moves(gcp):
    gcp.faults.operation_seconds = 0.2
    gcp.artifactregistry.seeded = False
    build("v1")
    first = listing(gcp).json()["dockerImages"]
    assert [i["tags"] for i in first] == [["v1"]]
    build("v1")  # the same tag, a new build: the tag moves to the newer image, the older keeps none
    again = listing(gcp).json()["dockerImages"]
    assert [i["tags"] for i in again] == [[], ["v1"]] and again[0]["uri"] == first[0]["uri"]
    paged = listing(gcp, pageSize=1).json()
    assert len(paged["dockerImages"]) == 1 and paged["nextPageToken"]
    assert listing(gcp, location="europe-west4").status_code == 404  # pushed to us-central1 only
