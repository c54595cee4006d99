"""The training image, built from the user's machine: the Cloud Build of the base image (build), the
user's own layer on it (user_layer), and which image a job runs when none is named (default)."""
