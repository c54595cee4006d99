"""Instance templates, global and regional, and the instance properties VMs take from one.

A template holds `properties` (InstanceProperties: machine type and accelerator types by bare
name, as bulkInsert's instanceProperties does). instances.insert names one with the
`sourceInstanceTemplate` query parameter, bulkInsert with the body field of that name; what the
request itself gives overrides the template's properties.
"""

from __future__ import annotations

from ..core import check_name, invalid, not_found, required
from .state import Project, _check_labels, _mutation, last


class TemplatesMixin:
    @_mutation(sweep=False)
    def insert_instance_template(self, p: Project, region: str | None, body: dict) -> dict:
        check_name("resource.name", body.get("name"))
        props = body.get("properties")
        if not props:
            raise required("resource.properties")
        if not props.get("machineType"):
            raise required("resource.properties.machineType")
        mt = last(props["machineType"])
        if mt not in self.world.machine_types:
            raise invalid("resource.properties.machineType", props["machineType"],
                          f"Machine type with name '{mt}' does not exist.")
        _check_labels(props.get("labels") or {}, "resource.properties.labels")
        scope = "global"
        if region is not None:
            self._check_region(region)
            scope = f"regions/{region}"
        tpl = {"kind": "compute#instanceTemplate", "description": "", **body}
        if region is not None:
            tpl["region"] = self.link(p.name, scope)
        return self._insert(p, f"{scope}/instanceTemplates", scope, tpl)

    def _template_properties(self, p: Project, source: str, region: str, field: str) -> dict:
        """The properties of the template a request names (global/..., regions/R/..., or a full URL)."""
        if "/regions/" in f"/{source}":
            where = source.split("regions/", 1)[1].split("/", 1)[0]
            if where != region:
                # The refusal is documented (a regional template serves its own region); the wording is unverified.
                raise invalid(field, source, f"A regional instance template must be in region '{region}'.")
            path = f"regions/{where}/instanceTemplates"
        else:
            path = "global/instanceTemplates"
        tpl = p.coll(path).get(last(source))
        if tpl is None:
            raise not_found(f"projects/{p.name}/{path}/{last(source)}")
        return tpl["properties"]
