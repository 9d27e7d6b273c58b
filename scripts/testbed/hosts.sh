#!/usr/bin/env bash
# A multi-host test bed on one Linux machine: three "hosts" (login, hosta, hostb), each a network namespace with
# its own hostname, /etc/hosts and sshd, joined by a bridge that lives in a fourth namespace. Nothing is added to
# the machine's own network stack: every address (198.18.0.0/15, set aside for test beds) exists only inside
# the namespaces. Needs root, iproute2, util-linux (unshare) and openssh-server/-client.
#
#   scripts/testbed/hosts.sh up            create the namespaces, keys, sshds
#   scripts/testbed/hosts.sh exec HOST CMD run CMD on HOST (its network, hostname, /etc/hosts and ~/.ssh)
#   scripts/testbed/hosts.sh down          stop the sshds (by pid file) and delete the namespaces
#
# Environment: TESTBED_PREFIX (namespace name prefix, default "mjf"), TESTBED_DIR (keys, configs, logs, pid
# files; default /tmp/<prefix>-testbed). Inside each host, ~/.ssh is the test bed's own directory (a bind mount
# private to that command), holding a client key, known_hosts and an ssh config that also names the hosts by
# aliases node-<x> (HostName = the address) to show that ssh config aliases work as --hosts.
set -euo pipefail

PREFIX="${TESTBED_PREFIX:-mjf}"
DIR="${TESTBED_DIR:-/tmp/${PREFIX}-testbed}"
HOSTS=(login hosta hostb)
NET=198.18.0
SWITCH="${PREFIX}-sw"

ns() { echo "${PREFIX}-$1"; }
addr() { local i; for i in "${!HOSTS[@]}"; do [ "${HOSTS[$i]}" = "$1" ] && echo "$NET.$((i + 1))"; done; }

home_ssh() { echo "$(getent passwd "$(id -u)" | cut -d: -f6)/.ssh"; }

# Run a command on a host: its network namespace (ip netns exec also binds /etc/netns/<ns>/hosts over
# /etc/hosts in a mount namespace of its own), its hostname (a UTS namespace) and the test bed's ~/.ssh.
run_on() {
  local host=$1
  shift
  local target
  target=$(home_ssh)
  [ -d "$target" ] || mkdir -m 700 -p "$target"
  exec ip netns exec "$(ns "$host")" unshare --uts sh -c \
    'hostname "$1" && mount --bind "$2" "$3" && shift 3 && exec "$@"' sh "$host" "$DIR/ssh" "$target" "$@"
}

up() {
  [ "$(id -u)" = 0 ] || { echo "hosts.sh: needs root (network namespaces)" >&2; exit 1; }
  command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || { echo "hosts.sh: sshd not installed" >&2; exit 1; }
  mkdir -p "$DIR/ssh"
  chmod 700 "$DIR" "$DIR/ssh"
  mkdir -p /run/sshd
  ip netns add "$SWITCH"
  ip -n "$SWITCH" link add br0 type bridge
  ip -n "$SWITCH" link set br0 up
  [ -f "$DIR/ssh/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$DIR/ssh/id_ed25519" -C testbed-client
  : >"$DIR/ssh/known_hosts"
  : >"$DIR/ssh/config"
  local i host n
  for i in "${!HOSTS[@]}"; do
    host=${HOSTS[$i]}
    n=$(ns "$host")
    ip netns add "$n"
    ip -n "$n" link set lo up
    ip link add "${PREFIX}v$i" netns "$SWITCH" type veth peer name eth0 netns "$n"
    ip -n "$SWITCH" link set "${PREFIX}v$i" master br0 up
    ip -n "$n" addr add "$(addr "$host")/24" dev eth0
    ip -n "$n" link set eth0 up
    mkdir -p "/etc/netns/$n"
    {
      echo "127.0.0.1 localhost"
      local h
      for h in "${HOSTS[@]}"; do echo "$(addr "$h") $h"; done
    } >"/etc/netns/$n/hosts"
    ssh-keygen -q -t ed25519 -N '' -f "$DIR/hostkey-$host" -C "$host" <<<y >/dev/null
    echo "$host,$(addr "$host") $(cut -d' ' -f1,2 "$DIR/hostkey-$host.pub")" >>"$DIR/ssh/known_hosts"
    echo "node-${host#host} $(cut -d' ' -f1,2 "$DIR/hostkey-$host.pub")" >>"$DIR/ssh/known_hosts"
    cat >"$DIR/sshd-$host.conf" <<CONF
ListenAddress $(addr "$host")
Port 22
HostKey $DIR/hostkey-$host
PidFile $DIR/sshd-$host.pid
AuthorizedKeysFile $DIR/ssh/id_ed25519.pub
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
LogLevel VERBOSE
MaxStartups 100
CONF
    cat >>"$DIR/ssh/config" <<CONF
Host node-${host#host}
  HostName $(addr "$host")
  HostKeyAlias node-${host#host}
CONF
  done
  cat >>"$DIR/ssh/config" <<CONF
Host *
  User $(id -un)
  IdentityFile $DIR/ssh/id_ed25519
  UserKnownHostsFile $DIR/ssh/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
CONF
  for host in "${HOSTS[@]}"; do
    ip netns exec "$(ns "$host")" unshare --uts sh -c 'hostname "$1" && exec "$2" -f "$3" -E "$4"' sh \
      "$host" "$(command -v sshd || echo /usr/sbin/sshd)" "$DIR/sshd-$host.conf" "$DIR/sshd-$host.log"
  done
  for host in "${HOSTS[@]}"; do  # sshd writes its pid file once it listens
    for _ in $(seq 50); do [ -s "$DIR/sshd-$host.pid" ] && break; sleep 0.1; done
    [ -s "$DIR/sshd-$host.pid" ] || { echo "hosts.sh: sshd on $host did not start (see $DIR/sshd-$host.log)" >&2; exit 1; }
  done
  echo "test bed up: ${HOSTS[*]} ($NET.1-${#HOSTS[@]}); run commands with: $0 exec HOST CMD..."
}

down() {
  local host pid
  for host in "${HOSTS[@]}"; do
    if [ -s "$DIR/sshd-$host.pid" ]; then
      pid=$(cat "$DIR/sshd-$host.pid")
      kill "$pid" 2>/dev/null || true
      # SIGTERM is not the end: wait for it (5 s, then SIGKILL), so that nothing runs once `down` returns.
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
      rm -f "$DIR/sshd-$host.pid"
    fi
    ip netns del "$(ns "$host")" 2>/dev/null || true
    rm -rf "/etc/netns/$(ns "$host")"
  done
  ip netns del "$SWITCH" 2>/dev/null || true
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  exec) shift; [ $# -ge 2 ] || { echo "usage: $0 exec HOST CMD..." >&2; exit 2; }; run_on "$@" ;;
  *) echo "usage: $0 up | down | exec HOST CMD..." >&2; exit 2 ;;
esac
