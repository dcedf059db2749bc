"""A fabric sharded across servers, so a fabric too large for one machine still runs.

* :mod:`.servers`       ``servers.yaml``: the SSH hosts, their underlay addresses (strict
                        validation, file:line:key problems, like topology files);
* :mod:`.placement`     which server builds which node: whole pods (fat-tree) or leaf groups
                        (leaf-spine) on one server, the top tier spread, the cut reported;
* :mod:`.vxlan`         a cross-server link as one kernel VXLAN device per end, its own VNI,
                        the inner MTU checked against the link class;
* :mod:`.sharded`       several shards built by this process (one machine, tests);
* :mod:`.rpc`           the runner's client of one server's ``testbed worker`` over SSH;
* :mod:`.ssh_fabric`    the runner's fabric over the servers' workers;
* :mod:`.remote_agents` the agents the workers start, as the runner sees them;
* :mod:`.worker`, :mod:`.relay` the server's side: the worker and its agents' relay.
"""
