"""A fabric sharded across servers (issue 13).

* :mod:`.servers`   ``servers.yaml``: the SSH hosts, their underlay addresses (strict
                    validation, file:line:key problems, like topology files);
* :mod:`.placement` which server builds which node: whole pods (fat-tree) or leaf groups
                    (leaf-spine) on one server, the top tier spread, the cut reported;
* :mod:`.vxlan`     a cross-server link as one kernel VXLAN device per end, its own VNI,
                    the inner MTU checked against the link class.
"""
