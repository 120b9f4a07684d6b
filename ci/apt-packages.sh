#!/bin/sh
# Install the Debian packages named on the command line that are not installed yet, without
# letting their maintainer scripts start system services (a policy-rc.d that says no is put
# in place only when none exists, and removed again). Run as root; used by .ci/run for the
# real components some tests need (prometheus-node-exporter, slurmctld/slurmd, munge,
# chromium for the HTML reports' browser tests).
set -eu

missing=
for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' ||
        missing="$missing $pkg"
done
[ -n "$missing" ] || exit 0

export DEBIAN_FRONTEND=noninteractive
created_policy=
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    created_policy=1
fi
echo "apt-packages: installing$missing" >&2
apt-get update -qq
# shellcheck disable=SC2086 # one word per package
apt-get install -y -qq --no-install-recommends $missing >/dev/null
[ -z "$created_policy" ] || rm -f /usr/sbin/policy-rc.d
