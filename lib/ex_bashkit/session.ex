defmodule ExBashkit.Session do
  # Before the moduledoc: the docs quote the defaults from their one declaration.
  alias ExBashkit.Session.Defaults

  @moduledoc """
  A persistent, stateful sandbox.

  Unlike `ExBashkit.exec/1`, which runs each script in a fresh interpreter, a
  session is a long-lived `bashkit::Bash` whose state carries across calls:
  environment variables, shell variables and arrays, the current working
  directory, the in-memory virtual filesystem, shell functions, aliases and
  `shopt` settings all persist from one `exec/2` to the next.

  What bash keeps only for the length of a script does not: every exec starts
  with `$?` at `0`, no traps, and the `set` options (`-e`, `-u`, `-x`,
  `-o pipefail`, ...) off. bashkit resets them between execs by design, so one
  script cannot leave a trap or `set -e` behind for the next; snapshots do
  not carry them either. Start each script that needs them with, e.g.,
  `set -euo pipefail`. `state/1`'s `last_exit_code` is the status the last
  exec ended with.

  The handle is opaque. Hold it for as long as you want the state to live; it is
  reclaimed when it is garbage-collected. A session serializes its own calls:
  concurrent `exec/2` calls on the same session run one at a time, in arrival
  order; different sessions run in parallel.

  ## Example

      iex> session = ExBashkit.Session.new()
      iex> {:ok, _} = ExBashkit.Session.exec(session, "export COUNT=1")
      iex> {:ok, result} = ExBashkit.Session.exec(session, "echo $COUNT")
      iex> result.stdout
      "1\\n"

  ## Where scripts run

  A quick script (a few builtins such as `echo`, `cd` or `pwd`, or the
  session's own `:builtins`, with literal arguments, whose cost this session
  has measured to be small) runs inside the `exec/2` call on the caller's
  own scheduler, as any short NIF does. Any other script first runs inside
  the call on a dirty CPU scheduler for at most 500 µs (either way on a
  large stack of its own): a short script answers right there, with no
  thread hand-off. A script that waits (for a custom builtin, `sleep`, the
  network) holds no thread meanwhile; a custom builtin's answer resumes it
  right where the answer is handed over, on the caller's scheduler again
  for a quick script. A script that runs longer moves to the library's
  runner threads (one per core, at a lower CPU priority than the VM's) and
  the answer comes as a message. A long script therefore holds no scheduler,
  deep recursion in a script cannot overflow a scheduler's stack, and
  CPU-bound scripts share the runners fairly (they yield every 64 commands)
  without stalling other sessions or the VM.

  ## Options

  `new/1` accepts options that seed the session's initial state:

  #{ExBashkit.Session.Options.docs()}

  A malformed option raises `ArgumentError` naming the option.

  **Node-wide ceilings.** `config :ex_bashkit, max_timeout_ms: ms,
  max_reply_bytes: bytes` caps what any session may ask for: a session whose
  `limits: [timeout_ms: ...]`, `:builtin_timeout_ms` or `:max_reply_bytes`
  is above its ceiling raises at `new/1`, and the defaults are lowered to
  the ceilings (a session without `:timeout_ms` gets bashkit's
  #{div(Defaults.bashkit_limit(:timeout_ms), 1000)} s default,
  or the ceiling if lower). A ceiling that is not a positive integer (or
  `nil`) makes every `new/1` raise, naming it.

  ## Resource limits

  bashkit already bounds execution with safe defaults; `:limits` tightens them
  for untrusted scripts. Each key is optional; unset keys keep bashkit's
  default. When a script exceeds a limit, `exec/2` returns
  `{:error, message}` naming the key to raise, and `run/3`
  `{:error, %ExBashkit.Error{reason: :limit, limit: key}}` (`reason: :timeout`
  for `:timeout_ms`) with the output written until then; the session stays
  usable.

      session = ExBashkit.Session.new(limits: [max_commands: 1_000, timeout_ms: 2_000])

  #{ExBashkit.Session.Options.limits_docs()}

  Count limits must be non-negative integers (a value past the platform maximum
  means "unlimited"); unknown keys raise `ArgumentError`.

  Some commands have fixed caps of their own in bashkit 0.20 that no limit
  raises. Reaching one is never a silently shortened answer: the command says
  so on stderr, and those marked "exit 1" fail (inside a pipeline the status
  is the pipeline's, as in bash: use `set -o pipefail` or `${PIPESTATUS[@]}`).
  Checked by `test/ex_bashkit/error_test.exs` for `seq` and `yes`:

  | command | cap | when reached |
  |---|---|---|
  | `seq` | 100,000 lines or 1 MiB of output | output so far, exit 1, `seq: line limit (100000) exceeded; output truncated` |
  | `yes` | 10,000 lines or 1 MiB | likewise, `yes: ...` |
  | `numfmt`, `history` | 1 MiB of output | likewise |
  | `find`, `expand` | 1 MiB of output | exit 1, stderr names the cap |
  | `awk` | 10 MB of output, 10,000 iterations of one loop, 16 MiB per string | `awk: fatal: ...`, exit 2 |
  | `dd` | 64 MiB moved (the session's 32 MB budget of intermediate bytes usually stops it first: `{:error, %ExBashkit.Error{reason: :limit}}`) | `dd: stopped after ... bytes (bashkit dd limit)` |
  | `sed` | 1,000 branch steps per input line | exit 0 with `sed: warning: branch/label loop limit (1000) reached` |
  | `sleep` | 60 seconds | sleeps 60 s, silently (the exec's `:timeout_ms` bounds wall clock) |
  | `timeout` | 300 seconds | the duration is lowered to 300 s |

  The cumulative and per-script limits above are how to bound the work of a
  script as a whole.

  ## Virtual filesystem

  A session's in-memory filesystem is shared between scripts and the host. Use
  `write_file/3` to place files (e.g. inputs) and `read_file/2` to pull files
  back out (e.g. results a script produced) without going through a script:

      iex> session = ExBashkit.Session.new(files: %{"/in.txt" => "data\\n"})
      iex> {:ok, _} = ExBashkit.Session.exec(session, "wc -l < /in.txt > /out.txt")
      iex> ExBashkit.Session.read_file(session, "/out.txt")
      {:ok, "1\\n"}

  The filesystem functions resolve paths from the root, whatever the session's
  working directory; a relative path like `"out.txt"` means `"/out.txt"`.
  Contents are raw binaries: any bytes round-trip, NUL and non-UTF-8 included.

  ## Custom builtins

  `:builtins` registers Elixir-defined virtual executables: a script line
  `name args...` calls back into your application, which computes the
  command's output. This is how a sandbox reaches capabilities you control (a
  database query, a key/value lookup, an approval prompt) without giving the
  script real process or network access.

      iex> store = %{"answer" => "42"}
      iex> session =
      ...>   ExBashkit.Session.new(
      ...>     builtins: %{
      ...>       "kv_get" => fn call ->
      ...>         case Map.fetch(store, hd(call.args)) do
      ...>           {:ok, value} -> {:ok, value <> "\\n"}
      ...>           :error -> {:error, "no such key\\n"}
      ...>         end
      ...>       end
      ...>     }
      ...>   )
      iex> {:ok, %ExBashkit.Result{stdout: "42\\n"}} =
      ...>   ExBashkit.Session.exec(session, "total=$(kv_get answer); echo $total")

  Each builtin is a 1-arity function receiving one map:

    * `:args` - the command's arguments (a list of strings), excluding the name.
    * `:stdin` - input piped from the previous command (`""` if none).
    * `:env` - the session's exported environment variables
      (`%{String.t() => String.t()}`).

  It returns:

    * `{:ok, iodata}` - success; the iodata becomes stdout, exit code `0`.
    * `{:error, iodata}` - failure; the iodata becomes stderr, exit code `1`.
    * `%ExBashkit.Result{}` - full control over stdout, stderr and exit code.

  Anything else is a contract violation: the command fails (exit 1) with a
  descriptive stderr message. A builtin works wherever a command can stand:
  pipelines, `$(...)`, loops, functions.

  **Robustness.** A builtin that raises, throws, exits, or runs longer than
  `:builtin_timeout_ms` (exit 124) fails only that command; the session and
  the caller stay alive.

  **Where it runs.** Each call runs in a fresh process, unlinked from the
  caller, never in the caller's process: do not rely on the caller's process
  dictionary or `self()`. The caller only dispatches requests while it waits.

  **No re-entrancy.** A builtin must not call `exec/3` on its own session: the
  script that called it holds the session, so such a call returns
  `{:error, "re-entrant exec: ..."}` at once. Driving a different session from
  inside a builtin is fine, including under load: a script waiting for a
  builtin holds no thread at all, never a scheduler.

  ## Virtual filesystem backends

  `:virtual_fs` mounts an Elixir-backed filesystem at a path: a script's
  reads, writes, listings, stats, `mkdir`s and removals under that path are
  serviced by your application, so "files" can be generated on demand or
  proxied to a real store. It composes with the in-memory filesystem,
  `:files` and host mounts.

      iex> session =
      ...>   ExBashkit.Session.new(
      ...>     virtual_fs: %{
      ...>       "/api" => fn
      ...>         %{op: :read, path: path} -> {:ok, ~s({"path": "\#{path}"}\\n)}
      ...>         _ -> {:error, :enotsup}
      ...>       end
      ...>     }
      ...>   )
      iex> {:ok, %ExBashkit.Result{stdout: out}} = ExBashkit.Session.exec(session, "cat /api/users/1.json")
      iex> out
      ~s({"path": "/users/1.json"}\\n)

  A backend is a `t:virtual_fs_spec/0`. Paths arrive rooted at the mount. The
  same failure model, `:builtin_timeout_ms` and no-re-entrancy rule as custom
  builtins apply. See `ExBashkit.VirtualFs` for the full contract.
  ## Host mounts

  By default nothing on the real host is reachable. `:mounts` maps real host
  directories into the sandbox's filesystem:

      ExBashkit.Session.new(
        mounts: [
          {"/data", "/srv/app/data", :read_only},
          {"/work", "/tmp/sandbox-work", :read_write}
        ]
      )

    * `:read_only` - scripts read host files; every write (`>`, `>>`, `rm`,
      `mv`, `mkdir`, `touch`, `cp`, `ln`, `chmod`, `sed -i`, ...) fails with
      "realfs is mounted readonly" on stderr and a non-zero exit.
    * `:read_write` - writes reach the real disk. A footgun: use a dedicated
      directory. There is no quota: a script can grow files there within its
      `:limits`, and a host file a script reads is loaded into memory whole.

  The filesystem functions (`read_file/2`, `write_file/3`, `stat/2`,
  `list_dir/2`, `mkdir/3`, `remove/3`, `rename/3`) go through mounts exactly as
  scripts do; under a `:read_only` mount a write returns
  `{:error, "<path>: read-only file system"}`. Changes made on the host are
  visible at once. Mounts are configuration: `snapshot/2` does not capture
  their contents.

  Isolation inside a mount is checked on every access, atomically: each mount
  holds a handle on its host directory, and every access is resolved beneath
  it without following any host symlink (`openat2(RESOLVE_BENEATH |
  RESOLVE_NO_SYMLINKS)`), so a host process swapping an entry for a symlink
  while a script runs cannot redirect it:

    * a mount of `/srv/app/data` never reaches `/srv/app/secrets`, nor
      `/srv/app/data2`;
    * `..` is resolved in the sandbox, so `/data/..` is the sandbox's `/`, not
      the host's `/srv/app`;
    * a symlink's target, when followed, names a *sandbox* path, so an
      absolute link to `/etc/passwd` is the sandbox's `/etc/passwd`, never the
      host's; `readlink` shows an absolute target inside the mount as its
      sandbox path, and one outside it not at all;
    * scripts cannot create symlinks with an absolute target or a `..` in a
      `:read_write` mount, nor set setuid, setgid or sticky bits (modes are
      masked to `0o777` on every write, copy and chmod);
    * the mounted directory itself cannot be removed or renamed (`rm -rf
      /data` empties it and fails with "Device or resource busy");
    * a host file larger than the sandbox's file size limit (10 MB) is refused
      before it is read, and a FIFO, socket or device node is never read.

  Some host locations are refused by default, judged after resolving symlinks:
  the filesystem root, `/etc`, `/proc`, `/sys`, `/dev`, `/boot`, `/root`,
  `/home`, `/Users`, `/run`, `/var` (databases, container state, run-time
  secrets), `/private` (on macOS this includes the temporary directories
  under `/private/var/folders`), and any path through a `.ssh`, `.aws`,
  `.kube`, `.docker`, `.gnupg` or `.gcloud` directory; the host's programs
  (`/usr`, `/bin`, `/sbin`, `/lib*`, `/opt`, `/snap`) may be mounted
  `:read_only` only. SECURITY.md gives the verdict on every top-level
  directory. `:allowed_mount_paths` is a switch, not an addition: once it is
  set, that denylist is off and the allowlist is the only gate: every mount's
  host path (resolved) must then sit under one of its entries. An empty list
  admits nothing.

  A misconfigured mount raises `ArgumentError` from `new/1`, naming the mount
  and the reason: an unknown mode, a host path that is missing, not a directory
  or refused, a mount at `/`, two mounts at one path, or a path also used by
  `:virtual_fs`. A mount is never silently skipped.

  `mount/4` and `unmount/2` add and remove host mounts while the session
  lives, with the same checks, leaving shell state alone. `reset/1` returns to
  the mounts given to `new/1`; snapshots carry no mounts (see `mount/4`).

  ## Network access

  By default a session has no network: `curl`, `wget` and `http` fail with
  "Could not resolve host: NAME" on stderr and a non-zero exit, as for a
  host that does not exist (the 404 principle: what the policy refuses reads
  as absent, never as refused; a path outside the allowed prefixes of an
  allowed host gets a `404 Not Found` that never reaches the server).
  `:allow_net` grants access to a list of URL patterns:

      session =
        ExBashkit.Session.new(
          allow_net: ["https://api.example.com", "https://cdn.example.com/assets"]
        )

      {:ok, result} = ExBashkit.Session.exec(session, "curl -s https://api.example.com/v1/health")

  The allowlist is default-deny. A request is allowed when its scheme, host
  and port equal a pattern's (default ports applied; no wildcards, a subdomain
  is another host) and its path starts with the pattern's path at a segment
  boundary (`/assets` allows `/assets` and `/assets/x`, not `/assetsx`).
  URLs and patterns are parsed by the same URL parser before they are compared,
  so `http://2130706433/` is `http://127.0.0.1/`. A pattern must be an
  `http`/`https` URL with a host and no credentials, query or fragment, or
  `new/1` raises `ArgumentError`. An empty list means no network.
  `allow_net: :all` lifts the allowlist: only for fully trusted scripts.

  Redirects are not followed: the script gets the 3xx response. `curl -L`
  follows one only when the next URL passes the same checks, so a response
  cannot bounce a script to an unlisted host.

  Independently, `:block_private_ips` (default `true`) refuses any request
  whose host is, or resolves to, a private or reserved address (loopback,
  10/8, 172.16/12, 192.168/16, 169.254/16, 100.64/10, 0/8, multicast; `::1`,
  `fc00::/7`, `fe80::/10`, and IPv6 forms that embed such an IPv4 address),
  even when allowlisted. Names are checked again at connect time, against DNS
  rebinding. To reach a private address on purpose (a service on localhost),
  set `block_private_ips: false` and allowlist it: understand the SSRF
  exposure first.

  `curl`, `wget` and `http` are the only way out: there are no sockets
  (`/dev/tcp/...` is a plain path in the sandbox). Note that bashkit's `curl`
  and `wget` take short flags one by one: write `curl -s -L` and
  `wget -q -O -`; a bundle such as `-sL` is ignored.

  ## Credentials

  A script can call an API with a key it never sees. `:credentials` lists
  `{url_prefix, spec}` entries; every request under `url_prefix` (each
  prefix must lie within `:allow_net`) gets the headers at the network
  boundary, after the script built the request:

      ExBashkit.Session.new(
        allow_net: ["https://api.github.com/", "https://api.openai.com/"],
        credentials: [
          {"https://api.github.com/", bearer: github_token},
          {"https://api.openai.com/",
           header: {"authorization", "Bearer " <> openai_key}, placeholder: "OPENAI_API_KEY"}
        ]
      )

  `spec` is `bearer: token` (`Authorization: Bearer token`),
  `header: {name, value}` or `headers: [{name, value}]`. Without
  `:placeholder` the headers are added to every request under the prefix,
  replacing the script's own of the same name. With `placeholder: "NAME"`
  the script's `$NAME` holds an opaque stand-in (`bk_placeholder_` and 32
  hex digits) instead, for tools that insist on a key: it is replaced by
  the secret on the wire, in the credential's own headers, under the prefix
  only, when it occurs once in the value (for `bearer:` it stands for the
  token, `Authorization: Bearer $NAME`; for `header:` for the whole value,
  `authorization: $NAME`). Sent anywhere else, it stays a stand-in.

  The secret is never in the session: not in its environment, files or
  `/proc`, `state/1`, snapshots, `export_tar/3`, results and errors, the
  `:egress` callback's view (`"[REDACTED]"`), answers that echo it back
  (redacted before the script reads them), `inspect/1` of a session, an
  `ExBashkit.Server` or `ExBashkit.Pool` (the option is kept sealed in a
  closure), logs, or `ExBashkit.Tool`'s texts. A redirect to another prefix
  gets no credential (`curl -L` also drops the script's `Authorization` and
  `Cookie` headers across origins). What remains (SECURITY.md): a server
  under the prefix that sends the secret back encoded gets past the
  redaction, and every request the script makes under the prefix carries
  the credential, which is the grant: give the narrowest prefix.

  `:egress` gives the host a say on every request `:allow_net` admitted:
  a function (or `{module, arg}`, see `ExBashkit.Egress`) called with
  `%{method, url, headers}` (credentials redacted), answering `:allow` or
  `:deny` within `:builtin_timeout_ms`; a crash or a timeout denies. A
  denied request reads as one outside `:allow_net` (`404 Not Found`). Each
  exec's result lists what was asked for in `:requests` (see
  `ExBashkit.Result`), with or without `:egress`.
  """

  alias ExBashkit.{Backend, Error, Result}
  alias ExBashkit.Session.{Exec, Fs, Options, Trash}

  @enforce_keys [:resource]
  defstruct [
    :resource,
    location: :in_node,
    timeout_ms: nil,
    builtins: %{},
    virtual_fs: %{},
    egress: nil,
    callback_timeout_ms: Defaults.get(:builtin_timeout_ms),
    max_reply_bytes: Defaults.get(:max_reply_bytes),
    # What `fork/2` builds the new session from: `new/1`'s configuration
    # without its seed files (the fork's filesystem is its parent's).
    fork_spec: nil
  ]

  @opaque t :: %__MODULE__{
            resource: reference(),
            location: ExBashkit.Backend.location(),
            timeout_ms: pos_integer() | nil,
            builtins: %{optional(String.t()) => (map() -> term())},
            virtual_fs: %{optional(String.t()) => term()},
            egress: ExBashkit.Egress.decider() | nil,
            callback_timeout_ms: pos_integer(),
            max_reply_bytes: pos_integer(),
            fork_spec: map() | nil
          }

  @typedoc "A filesystem entry's kind, as reported by `stat/2` and `list_dir/2`."
  @type fs_type :: :file | :dir | :symlink

  @typedoc "A resource-limit key accepted by the `:limits` option."
  # Written from the one list of limits, `ExBashkit.Session.Options`'.
  @type limit_key ::
          unquote(
            ExBashkit.Session.Options.limit_keys()
            |> Enum.reverse()
            |> Enum.reduce(&{:|, [], [&1, &2]})
          )

  @typedoc "Access mode for a host directory mount."
  @type mount_mode :: :read_only | :read_write

  @typedoc """
  A virtual-filesystem backend for one mount: a 1-arity function, a module
  implementing `ExBashkit.VirtualFs`, or `{module, arg}`.
  """
  @type virtual_fs_spec :: (map() -> term()) | module() | {module(), term()}

  @typedoc "An option accepted by `new/1`."
  @type option ::
          {:env, %{optional(String.t() | atom()) => String.t()} | keyword()}
          | {:cwd, Path.t()}
          | {:username, String.t()}
          | {:hostname, String.t()}
          | {:files, %{optional(Path.t()) => iodata()} | [{Path.t(), iodata()}]}
          | {:mounts, [{Path.t(), Path.t(), mount_mode()}]}
          | {:allowed_mount_paths, [Path.t()]}
          | {:limits,
             %{optional(limit_key()) => non_neg_integer()} | [{limit_key(), non_neg_integer()}]}
          | {:allow_net, [String.t()] | :all}
          | {:block_private_ips, boolean()}
          | {:credentials, [{String.t(), keyword()}]}
          | {:egress, ExBashkit.Egress.decider()}
          | {:builtins, %{optional(String.t()) => (map() -> term())}}
          | {:builtin_timeout_ms, pos_integer()}
          | {:max_reply_bytes, pos_integer()}
          | {:virtual_fs, %{optional(Path.t()) => virtual_fs_spec()}}
          | {:python, boolean() | keyword()}
          | {:git, boolean() | [{:author, {String.t(), String.t()}} | {:remotes, [String.t()]}]}
          | {:sqlite, boolean()}
          | {:typescript, boolean()}
          | {:isolation, :process | :in_node}
          | {:commands, [allow: [String.t()]] | [deny: [String.t()]]}
          | {:soft_delete, boolean() | [trash: Path.t()]}

  @typedoc "An option accepted by `exec/3`."
  @type exec_option ::
          {:stdin, iodata()}
          | {:timeout_ms, pos_integer()}
          | {:stream_to, pid() | {pid(), term()}}
          | {:track_changes, boolean()}

  @doc """
  Create a new persistent session, optionally seeding its initial state.

  See the module doc for the supported `opts`. Malformed options raise
  `ArgumentError` (they are a programmer error), as does a `:files` entry that
  cannot be written or a host mount that cannot be made (see "Host mounts").

  ## Examples

      iex> session = ExBashkit.Session.new(env: [GREETING: "hello"], cwd: "/work")
      iex> {:ok, result} = ExBashkit.Session.exec(session, "echo $GREETING from $(pwd)")
      iex> result.stdout
      "hello from /work\\n"
  """
  @spec new([option()]) :: t()
  def new(opts \\ []) do
    parsed = if opts == [], do: Options.parse_default!(), else: Options.parse!(opts)
    native = parsed.native

    case Backend.new(native, parsed.isolation, Options.inline?(native), Map.get(parsed, :group)) do
      {:ok, resource, location} ->
        %__MODULE__{
          resource: resource,
          location: location,
          timeout_ms: native.limits[:timeout_ms],
          builtins: parsed.builtins,
          virtual_fs: parsed.virtual_fs,
          egress: parsed.egress,
          callback_timeout_ms: parsed.callback_timeout_ms,
          max_reply_bytes: parsed.max_reply_bytes,
          fork_spec: native |> Map.replace(:files, []) |> Map.replace(:rootfs, nil)
        }

      {:error, message} ->
        raise ArgumentError, "ExBashkit.Session.new/1: " <> Error.text(message)
    end
  end

  @doc """
  Execute `script` against `session`, mutating it in place.

  Any env/cwd/filesystem/function changes the script makes persist for the
  next call. Returns `{:ok, %ExBashkit.Result{}}` on success (a non-zero
  `exit_code` is still `{:ok, ...}`, just like a real shell) or
  `{:error, message}` if the script could not be parsed, exceeded a limit,
  timed out, was cancelled, or the interpreter itself failed. The session
  stays usable either way.

  `run/3` is the same call answering `{:error, %ExBashkit.Error{}}`: the
  reason as an atom, the `:limits` key to raise, and what the script wrote
  before it stopped. Agents and anything that branches on the failure
  should call `run/3`; `message` here is that error's `:message`.

  Options (the same for `run/3`, `stream/3` and `exec_async/3`):

    * `:stdin` - iodata fed to the script's standard input.
    * `:timeout_ms` - a wall-clock limit for this call (positive integer),
      counted from the call (time queued behind other execs of the session
      included). The session's own `:timeout_ms` limit still applies; the
      tighter one wins. Past it the call fails with a timeout
      (`%ExBashkit.Error{reason: :timeout}` from `run/3`, `limit: nil` for
      this option, `limit: :timeout_ms` for the session's), with the output
      written until then. `:infinity` means no per-call
      limit. A script that has not stopped a second past its deadline (a
      command that never reaches a command boundary, or a worker too busy
      to run it) is answered then, with the output written so far. In a
      worker (`isolation: :process`) its worker is killed if it still runs
      after a grace period; in the node the command runs on until it ends,
      and the session's next exec waits for it.
    * `:stream_to` - `pid` or `{pid, tag}`: send output to `pid` while the
      script runs, as `{tag, {:stdout, chunk}}` and `{tag, {:stderr, chunk}}`
      messages (default tag `:ex_bashkit_output`), in the order it was
      produced, a chunk per command. The result still holds all output. See
      also `stream/3`.
    * `:track_changes` - `true` to fill the result's `:changes` with the files
      the exec created, modified and deleted (in-memory filesystem and host
      mounts). It lists the filesystem's metadata before and after the
      script: O(files) time, no contents read, both listings bounded by the
      call's deadline (a cut listing makes `changes.complete` `false`).
      Default `false`.

  An unknown option raises `ArgumentError` naming the valid ones; so does a
  first argument that is not a session.

  `cancel/1` from any process stops the running exec; it then fails with
  `"execution cancelled ..."` (`reason: :cancelled` from `run/3`).

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> {:ok, _} = ExBashkit.Session.exec(session, "cd /tmp")
      iex> {:ok, result} = ExBashkit.Session.exec(session, "pwd")
      iex> result.stdout
      "/tmp\\n"

      iex> session = ExBashkit.Session.new()
      iex> {:ok, result} = ExBashkit.Session.exec(session, "tr a-z A-Z", stdin: "shout\\n")
      iex> result.stdout
      "SHOUT\\n"

      iex> session = ExBashkit.Session.new()
      iex> {:error, message} = ExBashkit.Session.exec(session, "if then fi")
      iex> message =~ "parse error"
      true
  """
  @spec exec(t(), String.t(), [exec_option()] | map()) ::
          {:ok, Result.t()} | {:error, String.t()}
  def exec(session, script, opts \\ [])

  def exec(%__MODULE__{} = session, script, opts),
    do: Error.to_message(run(session, script, opts))

  def exec(other, _script, _opts), do: not_a_session!(other, "exec/3")

  @doc """
  Run `script` like `exec/3`, answering a failure as data:
  `{:ok, %ExBashkit.Result{}}` or `{:error, %ExBashkit.Error{}}`.

  The error's `:reason` says what happened (`:parse`, `:limit` with the
  `:limits` key in `:limit`, `:timeout`, `:cancelled`, `:crashed`, `:lost`,
  `:internal`; see `ExBashkit.Error`), and its `:stdout` and `:stderr` hold
  what the script wrote before it stopped: what an agent's tool call
  reports back to its model. Takes the options of `exec/3`.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> {:error, error} = ExBashkit.Session.run(session, "echo partial; sleep 5", timeout_ms: 1_000)
      iex> {error.reason, error.stdout}
      {:timeout, "partial\\n"}

      iex> session = ExBashkit.Session.new(limits: [max_loop_iterations: 10])
      iex> {:error, error} = ExBashkit.Session.run(session, "while true; do :; done")
      iex> {error.reason, error.limit}
      {:limit, :max_loop_iterations}
  """
  @spec run(t(), String.t(), [exec_option()] | map()) ::
          {:ok, Result.t()} | {:error, Error.t()}
  def run(session, script, opts \\ [])

  def run(%__MODULE__{} = session, script, opts), do: Exec.run(session, script, opts)
  def run(other, _script, _opts), do: not_a_session!(other, "run/3")

  @doc """
  Run `script` like `exec/3` and return a lazy `Stream` of its output.

  The script starts when the stream is first consumed, in the consuming
  process. The stream yields `{:stdout, chunk}` and `{:stderr, chunk}` as the
  script produces them, then ends with `{:exit, exit_code}`, or with
  `{:error, message}` if the script could not run to completion (as
  `exec/3` fails). Halting the stream early (e.g. `Enum.take/2`) cancels
  the script. For the failure as data, `run/3` with `:stream_to` streams
  the output as messages and answers `{:error, %ExBashkit.Error{}}`.

  Accepts the options of `exec/3` except `:stream_to`.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> session |> ExBashkit.Session.stream("echo one; echo two >&2; exit 3") |> Enum.to_list()
      [{:stdout, "one\\n"}, {:stderr, "two\\n"}, {:exit, 3}]
  """
  @spec stream(t(), String.t(), [exec_option()]) ::
          Enumerable.t(
            {:stdout | :stderr, binary()}
            | {:exit, integer()}
            | {:error, String.t()}
          )
  def stream(session, script, opts \\ [])

  def stream(%__MODULE__{} = session, script, opts) do
    session |> Exec.stream(script, opts) |> Stream.map(&Error.to_message/1)
  end

  def stream(other, _script, _opts), do: not_a_session!(other, "stream/3")

  @doc """
  Start `script` like `exec/3` without waiting for it: returns `{:ok, ref}` at
  once, and the calling process later receives

      {:ex_bashkit, ref, {:ok, %ExBashkit.Result{}} | {:error, %ExBashkit.Error{}}}

  exactly once. With `stream: true` it first receives the output as the
  script produces it, `{:ex_bashkit, ref, {:stdout, chunk}}` and
  `{:ex_bashkit, ref, {:stderr, chunk}}`, in order, before the final message.

  This is how a GenServer or a LiveView runs a script from a callback and
  keeps serving its own messages meanwhile (match the messages in
  `handle_info/2`); it is also what lets a custom builtin call back into that
  process (`GenServer.call/3` on the process blocked in `exec/3` cannot be
  served, see "Custom builtins" above).

  Takes the options of `exec/3` (a keyword list or a map) except
  `:stream_to`, plus `:stream` (boolean, default `false`). The script is
  queued behind the session's other calls like any exec, and this returns
  once it is: a call made after it on the session runs after it (a short
  script has often run by then). `cancel/2` with the
  `ref`, from any process, stops it (the final message is then
  `{:error, %ExBashkit.Error{reason: :cancelled}}`); so does the death of the
  calling process, whose exec nobody would read.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> {:ok, ref} = ExBashkit.Session.exec_async(session, "echo hi")
      iex> receive do
      ...>   {:ex_bashkit, ^ref, {:ok, result}} -> result.stdout
      ...> after
      ...>   5_000 -> :timeout
      ...> end
      "hi\\n"
  """
  @spec exec_async(t(), String.t(), keyword() | map()) :: {:ok, reference()}
  def exec_async(session, script, opts \\ [])

  def exec_async(%__MODULE__{} = session, script, opts),
    do: ExBashkit.Session.Async.start(session, script, opts)

  def exec_async(other, _script, _opts), do: not_a_session!(other, "exec_async/3")

  @doc """
  Stop the exec started by `exec_async/3` as `ref`, from any process.

  The caller of `exec_async/3` then receives
  `{:ex_bashkit, ref, {:error, %ExBashkit.Error{reason: :cancelled}}}` (with
  the output written so far), unless the exec had already ended, in which
  case this does nothing. Always returns `:ok`.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> {:ok, ref} = ExBashkit.Session.exec_async(session, "sleep 5")
      iex> ExBashkit.Session.cancel(session, ref)
      :ok
      iex> receive do
      ...>   {:ex_bashkit, ^ref, {:error, error}} -> error.reason
      ...> after
      ...>   5_000 -> :timeout
      ...> end
      :cancelled
  """
  @spec cancel(t(), reference()) :: :ok
  def cancel(%__MODULE__{}, ref) when is_reference(ref), do: ExBashkit.Session.Async.cancel(ref)

  @doc """
  Stop the exec running on `session`, from any process.

  The script stops at its next command boundary (or budget check); that
  `exec/3` returns `{:error, "execution cancelled ..."}` (`run/3`:
  `{:error, %ExBashkit.Error{reason: :cancelled}}`). The session
  keeps its state as the script left it, and stays usable. Execs queued behind
  the running one are not affected. Returns `:ok` if an exec was running,
  `:idle` if none was.

  A command that checks for neither (see the README's isolation table) is
  answered a second after the cancel without waiting for it, with the
  output written so far; the command runs on until it ends (in a worker,
  until its worker is killed after a grace period).

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> ExBashkit.Session.cancel(session)
      :idle
  """
  @spec cancel(t()) :: :ok | :idle
  def cancel(%__MODULE__{resource: resource, location: location}) do
    if Backend.cancel(resource, location), do: :ok, else: :idle
  end

  @doc """
  Where `session` runs and how that OS process is confined:

    * `:isolation` - `:process` (a worker OS process) or `:in_node`;
    * `:os_pid` - the worker's OS pid (nil in the node, or before its
      process has started);
    * `:group` - the session's `:group` (nil without one: the session has a
      process of its own, see `new/1`);
    * `:confinement` - the layers that process holds (see
      `ExBashkit.Worker`, "Confinement"): `:seccomp`, `:landlock` and
      `:no_new_privs` booleans, `:namespaces` (a list of `:user`,
      `:mount`, `:ipc`, `:uts`, `:network`: the network namespace is the
      VM's for a session granted `:allow_net`), and `:memory_limit`, the
      process's address-space cap in bytes (nil if none). In the node
      every layer is off.

  ## Examples

      iex> ExBashkit.Session.info(ExBashkit.Session.new(isolation: :in_node))
      %{isolation: :in_node, os_pid: nil, group: nil,
        confinement: %{seccomp: false, landlock: false, namespaces: [],
                       no_new_privs: false, memory_limit: nil}}
  """
  @spec info(t()) :: %{
          isolation: :process | :in_node,
          os_pid: integer() | nil,
          group: term() | nil,
          confinement: %{
            seccomp: boolean(),
            landlock: boolean(),
            namespaces: [atom()],
            no_new_privs: boolean(),
            memory_limit: integer() | nil
          }
        }
  def info(%__MODULE__{resource: resource, location: location}),
    do: Backend.placement(resource, location)

  @typedoc """
  An option of the lifecycle calls `state/2`, `reset/2`, `snapshot/2` and
  `restore/3` (see "Lifecycle calls" in `state/2`).
  """
  @type lifecycle_option :: {:timeout_ms, pos_integer() | :infinity}

  @doc """
  The session's shell state as a plain map, taken between scripts (it waits
  for a running exec to end): `{:ok, state}` or `{:error, message}`.

  `state` is `%{env: %{name => value}, variables: %{name => value}, cwd: path,
  functions: [name], aliases: %{name => expansion}, last_exit_code: integer,
  fs_usage: %{bytes: n, files: n, dirs: n}}`.
  `env` holds exported variables; `variables` every shell variable (exported
  ones too, and bash's own such as `PWD`). `fs_usage` is the filesystem's use
  of the `:max_fs_bytes` and `:max_files` limits (see "Resource limits").

  ## Lifecycle calls

  `state/2`, `reset/2`, `snapshot/2` and `restore/3` share these rules:

    * They run between scripts, in arrival order with `exec/3`: each waits
      for its turn behind the session's running (and earlier queued) execs.
    * `:timeout_ms` (positive integer or `:infinity`, default
      #{ExBashkit.Session.Lifecycle.default_timeout_ms()}) bounds that wait,
      counted from the call. Past it the call returns
      `{:error, "... timed out ..."}` and never runs. Once it has started it
      runs to its end: a reset or a restore is never half applied.
    * If the calling process dies while the call waits, the call is
      dropped, as an exec is.
    * Called from a custom builtin or `:virtual_fs` backend on the very
      session whose script it serves, each returns
      `{:error, "re-entrant ..."}` at once (the script holds the session).
    * Errors: `{:error, message}` for run-time failures (timeout,
      re-entrancy, a worker process that died, a rejected snapshot);
      `ArgumentError` for programmer errors (unknown or malformed options,
      a term that is not a session of this node). The conventions of every
      call are in the README's "Return shapes" table.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> {:ok, _} = ExBashkit.Session.exec(session, "export A=1; b=2; cd /tmp; f() { :; }; alias l=ls; false")
      iex> {:ok, state} = ExBashkit.Session.state(session)
      iex> {state.env["A"], state.variables["b"], state.cwd, state.functions, state.aliases, state.last_exit_code}
      {"1", "2", "/tmp", ["f"], %{"l" => "ls"}, 1}
  """
  @spec state(t(), [lifecycle_option()]) ::
          {:ok,
           %{
             env: %{optional(String.t()) => String.t()},
             variables: %{optional(String.t()) => String.t()},
             cwd: String.t(),
             functions: [String.t()],
             aliases: %{optional(String.t()) => String.t()},
             last_exit_code: integer(),
             fs_usage: %{
               bytes: non_neg_integer(),
               files: non_neg_integer(),
               dirs: non_neg_integer()
             }
           }}
          | {:error, String.t()}
  def state(session, opts \\ [])

  def state(%__MODULE__{} = session, opts),
    do: Error.to_message(ExBashkit.Session.Lifecycle.state(session, opts))

  def state(other, _opts), do: not_a_session!(other, "state/2")

  @doc """
  Mount host directory `host_path` at `vfs_path` while the session lives,
  `mode` being `:read_only` (default) or `:read_write`.

  The arguments are those of a `:mounts` entry, in the same order, and pass
  the same checks as at `new/1` (see "Host mounts"): the host path must be an
  existing directory, not a sensitive location (or, with
  `:allowed_mount_paths`, under an allowed prefix), judged after resolving
  symlinks; `vfs_path` must not be `/`, a path with a host mount already, or
  a `:virtual_fs` path. Malformed arguments raise `ArgumentError`; a refused
  mount returns `{:error, message}` and changes nothing.

  Shell state (variables, cwd, functions, aliases) is untouched. The mount
  takes effect between scripts: it waits for a running exec to end.

  Runtime mounts and the session's other operations:

    * `reset/1` returns to the mounts of `new/1`: runtime mounts are dropped,
      and `new/1` mounts removed with `unmount/2` come back.
    * A durable session whose OS process died comes back with the mounts it
      had (runtime mounts and unmounts included), each checked again.
    * `snapshot/2` captures no mounts, runtime or not (nor the host files
      under them); `restore/3` keeps the mounts the target has at that
      moment, runtime ones included.

  ## Examples

      iex> dir = Path.join(System.tmp_dir!(), "ex_bashkit_mount_doc")
      iex> File.mkdir_p!(dir)
      iex> File.write!(Path.join(dir, "hello.txt"), "hi\\n")
      iex> session = ExBashkit.Session.new()
      iex> ExBashkit.Session.mount(session, "/data", dir)
      :ok
      iex> {:ok, result} = ExBashkit.Session.exec(session, "cat /data/hello.txt")
      iex> result.stdout
      "hi\\n"
      iex> ExBashkit.Session.unmount(session, "/data")
      :ok
  """
  @spec mount(t(), Path.t(), Path.t(), mount_mode()) :: :ok | {:error, String.t()}
  def mount(%__MODULE__{} = session, vfs_path, host_path, mode \\ :read_only),
    do: Error.to_message(ExBashkit.Session.Mounts.mount(session, vfs_path, host_path, mode))

  @doc """
  Remove the host mount at `vfs_path`, whether `new/1` or `mount/4` made it.

  Paths under `vfs_path` fall back to whatever was there before (the
  in-memory filesystem). Returns `:ok`, or `{:error, message}` when no host
  directory is mounted there (a `:virtual_fs` backend cannot be unmounted).
  Shell state is untouched; like `mount/4`, it waits for a running exec.
  `reset/1` brings back the mounts of `new/1`.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> {:error, _} = ExBashkit.Session.unmount(session, "/nothing")
  """
  @spec unmount(t(), Path.t()) :: :ok | {:error, String.t()}
  def unmount(%__MODULE__{} = session, vfs_path),
    do: Error.to_message(ExBashkit.Session.Mounts.unmount(session, vfs_path))

  @doc """
  Put the session back in the state `new/1` built: its `:env`, `:cwd` and
  `:files`, with every variable, function, alias and in-memory file since
  then gone. Its capabilities stay: builtins, virtual_fs backends, host mounts
  (whose host files are, of course, not rolled back: a `:files` entry or the
  `:cwd` under a host mount is not written again), limits and network
  settings. Host mounts go back to those given to `new/1`: `mount/4`'s are
  dropped, and `new/1`'s removed by `unmount/2` return. Waits for a running
  exec to end. Returns `:ok` or `{:error, message}`; takes `:timeout_ms`
  and follows the rules of the lifecycle calls (see `state/2`).

  ## Examples

      iex> session = ExBashkit.Session.new(env: [KEEP: "1"])
      iex> {:ok, _} = ExBashkit.Session.exec(session, "export GONE=1; echo x > /tmp/f")
      iex> ExBashkit.Session.reset(session)
      :ok
      iex> {:ok, result} = ExBashkit.Session.exec(session, "echo $KEEP-$GONE; ls /tmp")
      iex> result.stdout
      "1-\\n"
  """
  @spec reset(t(), [lifecycle_option()]) :: :ok | {:error, String.t()}
  def reset(%__MODULE__{} = session, opts \\ []),
    do: Error.to_message(ExBashkit.Session.Lifecycle.reset(session, opts))

  @doc """
  Read the contents of `path` from the session's virtual filesystem.

  Returns `{:ok, binary}`, including for files a script wrote, or
  `{:error, message}` if the file does not exist or cannot be read. The result
  is a raw binary, so it round-trips arbitrary (including non-UTF-8) content.

  `path` is resolved from the filesystem root, independent of the session's
  working directory.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> {:ok, _} = ExBashkit.Session.exec(session, "echo result > /out.txt")
      iex> ExBashkit.Session.read_file(session, "/out.txt")
      {:ok, "result\\n"}
  """
  @spec read_file(t(), Path.t()) :: {:ok, binary()} | {:error, String.t()}
  def read_file(session, path), do: Error.to_message(Fs.read_file(session, path))

  @doc """
  Write `content` (any `t:iodata/0`) to `path` in the session's virtual
  filesystem, creating parent directories as needed.

  Returns `:ok`, or `{:error, message}` if the write was rejected (e.g. a
  filesystem limit, or a path that is a directory). The file is immediately
  visible to subsequent `exec/2` calls and to `read_file/2`. A relative path
  like `"out.txt"` is treated as `"/out.txt"`.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> ExBashkit.Session.write_file(session, "/etc/motd", "welcome\\n")
      :ok
      iex> {:ok, result} = ExBashkit.Session.exec(session, "cat /etc/motd")
      iex> result.stdout
      "welcome\\n"
  """
  @spec write_file(t(), Path.t(), iodata()) :: :ok | {:error, String.t()}
  def write_file(session, path, content),
    do: Error.to_message(Fs.write_file(session, path, content))

  @doc """
  List the entries of directory `path` in the session's filesystem.

  `{:ok, [{name, :file | :dir | :symlink}]}` sorted by name (names are the
  immediate children, not full paths), or `{:error, message}` if `path` is not
  a readable directory.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> {:ok, _} = ExBashkit.Session.exec(session, "mkdir /d; echo x > /d/a.txt")
      iex> ExBashkit.Session.list_dir(session, "/d")
      {:ok, [{"a.txt", :file}]}
  """
  @spec list_dir(t(), Path.t()) :: {:ok, [{String.t(), fs_type()}]} | {:error, String.t()}
  def list_dir(session, path), do: Error.to_message(Fs.list_dir(session, path))

  @doc """
  Create directory `path` in the session's filesystem.

  Returns `:ok` or `{:error, message}`. With `parents: true` it creates any
  missing parent directories (like `mkdir -p`) and succeeds if the directory
  already exists; without it, a missing parent is an error.

  ## Options

    * `:parents` - create missing parents (default `false`).

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> ExBashkit.Session.mkdir(session, "/a/b", parents: true)
      :ok
      iex> ExBashkit.Session.stat(session, "/a/b")
      {:ok, %{type: :dir, size: 0}}
  """
  @spec mkdir(t(), Path.t(), [{:parents, boolean()}]) :: :ok | {:error, String.t()}
  def mkdir(session, path, opts \\ []), do: Error.to_message(Fs.mkdir(session, path, opts))

  @doc """
  Remove `path` from the session's filesystem.

  Returns `:ok` or `{:error, message}`. Removing a non-empty directory requires
  `recursive: true`.

  ## Options

    * `:recursive` - remove a directory and its contents (default `false`).

  ## Examples

      iex> session = ExBashkit.Session.new(files: %{"/d/f" => "x"})
      iex> {:error, _} = ExBashkit.Session.remove(session, "/d")
      iex> ExBashkit.Session.remove(session, "/d", recursive: true)
      :ok
  """
  @spec remove(t(), Path.t(), [{:recursive, boolean()}]) :: :ok | {:error, String.t()}
  def remove(session, path, opts \\ []), do: Error.to_message(Fs.remove(session, path, opts))

  @doc """
  Rename/move `from` to `to` within the session's filesystem.

  Returns `:ok` or `{:error, message}`.

  ## Examples

      iex> session = ExBashkit.Session.new(files: %{"/a.txt" => "x"})
      iex> ExBashkit.Session.rename(session, "/a.txt", "/b.txt")
      :ok
      iex> ExBashkit.Session.read_file(session, "/b.txt")
      {:ok, "x"}
  """
  @spec rename(t(), Path.t(), Path.t()) :: :ok | {:error, String.t()}
  def rename(session, from, to), do: Error.to_message(Fs.rename(session, from, to))

  @doc """
  Return metadata for `path` in the session's filesystem.

  `{:ok, %{type: :file | :dir | :symlink, size: non_neg_integer()}}`, or
  `{:error, message}` if the path does not exist. A symlink is reported as
  itself, not followed. Like `read_file/2`, it resolves from the filesystem
  root; it does not wait for the interpreter, so it also answers while a script
  is running on the session.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> {:ok, _} = ExBashkit.Session.exec(session, "printf 12345 > /f")
      iex> ExBashkit.Session.stat(session, "/f")
      {:ok, %{type: :file, size: 5}}
  """
  @spec stat(t(), Path.t()) ::
          {:ok, %{type: fs_type(), size: non_neg_integer()}} | {:error, String.t()}
  def stat(session, path), do: Error.to_message(Fs.stat(session, path))

  # -- soft delete --------------------------------------------------------------

  @typedoc "One entry of the trash of a session with `soft_delete:` (see `trash/1`)."
  @type trash_entry :: %{
          path: String.t(),
          trash_path: String.t(),
          deleted_at: non_neg_integer(),
          type: fs_type(),
          size: non_neg_integer()
        }

  @doc """
  What the session's trash holds, oldest first: every file or directory a
  script (or the filesystem API) deleted or overwrote in the in-memory
  filesystem of a session built with `soft_delete: true` (or `[trash: path]`).

  Each entry has the `:path` it had, the `:trash_path` it has now
  (`<trash>/<n>_<name>`), `:deleted_at` (unix seconds), `:type` and `:size`.
  `{:error, message}` for a session without `:soft_delete` (the error of
  `trash!/1` has `reason: :not_supported`).

  ## Examples

      iex> session = ExBashkit.Session.new(soft_delete: true)
      iex> {:ok, _} = ExBashkit.Session.exec(session, "echo hi > /notes.txt; rm /notes.txt")
      iex> {:ok, [entry]} = ExBashkit.Session.trash(session)
      iex> {entry.path, entry.trash_path, entry.type}
      {"/notes.txt", "/.trash/1_notes.txt", :file}
  """
  @spec trash(t()) :: {:ok, [trash_entry()]} | {:error, String.t()}
  def trash(session), do: Error.to_message(Trash.trash(session))

  @doc """
  Put the most recently trashed entry of `original_path` back where it was
  (missing parent directories are created). `:ok` or `{:error, message}`:
  if nothing in the trash came from that path (`reason: :not_found` in
  `undelete!/2`'s error), if something is at that path again
  (`reason: :exists`; nothing changes then: remove it first, which trashes
  it, to swap the two), or without `:soft_delete` (`:not_supported`).

  ## Examples

      iex> session = ExBashkit.Session.new(soft_delete: true)
      iex> {:ok, _} = ExBashkit.Session.exec(session, "echo v1 > /f; echo v2 > /f; rm /f")
      iex> ExBashkit.Session.undelete(session, "/f")
      :ok
      iex> ExBashkit.Session.read_file(session, "/f")
      {:ok, "v2\\n"}
      iex> {:error, message} = ExBashkit.Session.undelete(session, "/f")
      iex> message
      "/f: something is at this path again; remove it first"
  """
  @spec undelete(t(), Path.t()) :: :ok | {:error, String.t()}
  def undelete(session, original_path),
    do: Error.to_message(Trash.undelete(session, original_path))

  # -- snapshot / restore -----------------------------------------------------

  @typedoc "An option accepted by `snapshot/2`."
  @type snapshot_option ::
          {:key, binary()}
          | {:exclude_filesystem, boolean()}
          | {:exclude_functions, boolean()}
          | lifecycle_option()

  @doc """
  Capture the session's interpreter state as a binary you can persist and
  later reload with `restore/3`, in this VM or another.

  The snapshot carries shell state (variables with their attributes, exported
  env, cwd, indexed and associative arrays, aliases, the directory stack and,
  unless excluded, functions) and the in-memory filesystem contents (files,
  directories, symlinks, permission bits; modification times are not kept). It
  is taken between commands: a snapshot asked for while a script runs waits for
  that script to end (snapshots and execs on one session run in arrival order).
  Traps and `$?` are in the snapshot too, but bashkit resets both at the start
  of every exec, so neither is ever seen after a restore, just as neither
  carries from one exec to the next.

  It does not carry configuration: custom `:builtins`, `:virtual_fs` backends,
  host mounts, whether from `:mounts` or `mount/4` (nor the host files under
  them), `:python`, `:git`, `:sqlite`, `:typescript`, `:limits` or
  network settings (a git repository and SQLite databases are files, so
  they are in it). To resume, build a session with the same capabilities and
  `restore/3` the bytes into it.

  Over a `:base` image, a snapshot holds only the session's own layer plus
  the image's id and the image paths the session deleted (keyed snapshots
  seal those too): it restores only into a session built over the same
  image (same content), and anything else gets `{:error, message}` naming
  the image. A snapshot of a session without a base does not restore into
  one with a base either.

  Returns `{:ok, binary}` or `{:error, message}`.

  ## Options

    * `:key` - a non-empty binary secret. The snapshot is sealed with
      HMAC-SHA256 under this key, for crossing a trust boundary (network,
      shared or untrusted storage); `restore/3` must be given the same key.
      Without a key the bytes carry a public checksum that detects accidental
      corruption only: anyone can forge unkeyed bytes, so restore those only
      from storage you trust.
    * `:exclude_filesystem` - capture shell state only (default `false`).
      Restoring such a snapshot leaves the target's files as they are.
    * `:exclude_functions` - leave shell functions out (default `false`).
      Restoring such a snapshot leaves the target with no functions.
    * `:timeout_ms` - how long to wait for the session's turn (see
      "Lifecycle calls" in `state/2`).

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> {:ok, %ExBashkit.Result{}} = ExBashkit.Session.exec(session, "x=42")
      iex> {:ok, bytes} = ExBashkit.Session.snapshot(session)
      iex> is_binary(bytes)
      true
  """
  @spec snapshot(t(), [snapshot_option()]) :: {:ok, binary()} | {:error, String.t()}
  def snapshot(session, opts \\ [])

  def snapshot(%__MODULE__{} = session, opts),
    do: Error.to_message(ExBashkit.Session.Snapshot.take(session, opts))

  def snapshot(other, _opts), do: not_a_session!(other, "snapshot/2")

  @doc """
  Restore state captured by `snapshot/2` into `session`, returning
  `{:ok, session}` or `{:error, message}`.

  Restore replaces the session's shell state and in-memory filesystem contents
  while keeping the capabilities `session` was built with: its custom
  `:builtins`, `:python`, `:git`, `:sqlite`, `:typescript`, `:virtual_fs`
  backends, host `:mounts` and `:limits` survive. Files the snapshot holds at or below one of this session's mount
  points (host or `:virtual_fs`) are dropped: the mount would hide them. The
  intended flow is therefore:

      {:ok, bytes} = ExBashkit.Session.snapshot(original)
      # ...later, or on another node...
      resumed = ExBashkit.Session.new(builtins: same, virtual_fs: same, limits: same)
      {:ok, resumed} = ExBashkit.Session.restore(resumed, bytes)

  A snapshot taken by a session that had builtins (custom, `:python`,
  `:git`, `:sqlite` or `:typescript`) this one lacks is refused with an error naming them: scripts restored into it
  might call them. Extra builtins on this side are fine.

  The whole snapshot is verified and decoded before anything changes, so a
  malformed, truncated, tampered or wrong-key snapshot returns
  `{:error, message}` and leaves the session exactly as it was, and usable.
  Keying is all-or-nothing: bytes taken with a `:key` must be restored with the
  same key, and plain bytes without one; a mismatch is an error.

  The cumulative usage counted against `:max_total_commands` and
  `:max_exec_calls` carries over: the restored session counts the source's
  past work against its own cumulative limits (it never lowers its own count).

  Like `exec/2`, a restore waits for a running script to end.

  ## Options

    * `:key` - the binary secret the snapshot was taken with (see `snapshot/2`).
    * `:timeout_ms` - how long to wait for the session's turn (see
      "Lifecycle calls" in `state/2`).

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> {:ok, %ExBashkit.Result{}} = ExBashkit.Session.exec(session, "x=42")
      iex> {:ok, bytes} = ExBashkit.Session.snapshot(session)
      iex> fresh = ExBashkit.Session.new()
      iex> {:ok, fresh} = ExBashkit.Session.restore(fresh, bytes)
      iex> {:ok, result} = ExBashkit.Session.exec(fresh, "echo $x")
      iex> result.stdout
      "42\\n"
  """
  @spec restore(t(), binary(), [{:key, binary()} | lifecycle_option()]) ::
          {:ok, t()} | {:error, String.t()}
  def restore(session, bytes, opts \\ [])

  def restore(session, bytes, opts), do: Error.to_message(restore_session(session, bytes, opts))

  @doc """
  The filesystem at `path` (default `"/"`) as a tar archive:
  `{:ok, binary}` or `{:error, message}`.

  Members are named relative to `path` (like `tar -C path .`; a file `path`
  gives one member, its base name), in name order: directories (empty ones
  too), regular files with their modes and modification times, symlinks with
  their targets (never followed). What is not the session's own is left
  out: host mounts and `:virtual_fs` mounts (content and mount points), the
  system files bashkit synthesizes (`/etc/passwd`, `/proc`, the command
  stubs in `/bin` and `/usr/bin`) and `/dev`. With a `:base` image, the
  archive holds the image as this session sees it (its own changes and
  deletions applied). Like `snapshot/2`, it waits for a running script.

  `new(rootfs: tar)` reads such an archive back.

  ## Options

    * `:gzip` - gzip the archive (default `false`).

  ## Examples

      iex> session = ExBashkit.Session.new(files: %{"/data/a.txt" => "x"})
      iex> {:ok, tar} = ExBashkit.Session.export_tar(session, "/data")
      iex> copy = ExBashkit.Session.new(rootfs: tar)
      iex> ExBashkit.Session.read_file(copy, "/a.txt")
      {:ok, "x"}
  """
  @spec export_tar(t(), Path.t(), [{:gzip, boolean()}]) :: {:ok, binary()} | {:error, String.t()}
  def export_tar(%__MODULE__{} = session, path \\ "/", opts \\ []),
    do: Error.to_message(ExBashkit.Session.Tar.export(session, path, opts))

  defp restore_session(%__MODULE__{} = session, bytes, opts) when is_binary(bytes) do
    with :ok <- ExBashkit.Session.Snapshot.restore(session, bytes, opts), do: {:ok, session}
  end

  defp restore_session(%__MODULE__{}, bytes, _opts) do
    raise ArgumentError,
          "restore/3: the snapshot must be a binary from snapshot/2, got: #{inspect(bytes, limit: 5)}"
  end

  defp restore_session(other, _bytes, _opts), do: not_a_session!(other, "restore/3")
  # -- history -------------------------------------------------------------------

  @typedoc "A commit's id: 64 lowercase hex characters (the SHA-256 of its content)."
  @type commit_id :: String.t()

  @typedoc "One commit of `log/2`."
  @type commit :: %{
          id: commit_id(),
          parents: [commit_id()],
          meta: %{optional(String.t()) => String.t()},
          at: DateTime.t() | nil
        }

  @doc """
  Record the session's state (files, env, cwd, variables, functions,
  aliases) as a commit in the node's `ExBashkit.Store`; returns its id.

  The commit's parent is the session's head (its last commit or checkout),
  and it becomes the new head. Content is addressed by its hash and stored
  once, whoever holds it: a commit stores only what changed since the
  head. `meta` is kept with it (keys strings or atoms, values strings,
  atoms or numbers; `log/2` gives them back as strings), and so is the time
  it was made. Like `snapshot/2`, it waits for a running script. A session
  over a `:base` image is refused for now (its deletions from the image
  would not be carried): use `snapshot/2` there.
  Each session keeps its last `ExBashkit.Store.history_limit/0` commits
  (100 unless configured); older ones are freed.

  What it costs: when a file changed since the last commit, a hash of
  every file the session holds (bashkit's commit: its cost grows with the
  bytes); when none did, the files' tree is the last commit's and only the
  shell state is encoded (a few KiB, whatever the files).

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> {:ok, _} = ExBashkit.Session.exec(session, "echo one > /f")
      iex> {:ok, id} = ExBashkit.Session.commit(session, %{message: "first"})
      iex> {:ok, _} = ExBashkit.Session.exec(session, "echo two > /f")
      iex> ExBashkit.Session.checkout(session, id)
      :ok
      iex> ExBashkit.Session.read_file(session, "/f")
      {:ok, "one\\n"}
  """
  @spec commit(t(), map()) :: {:ok, commit_id()} | {:error, String.t()}
  def commit(%__MODULE__{} = session, meta \\ %{}),
    do: ExBashkit.Session.History.commit(session, meta)

  @doc """
  Put the session back in the state of commit `commit_id` (files, env,
  cwd, variables, functions and aliases as they were), which becomes its
  head.

  Any commit of the store will do, one of another session too (that is how
  `fork/2` works). Refused with `{:error, message}`, the session unchanged,
  for an id the store does not hold, a commit whose objects fail their
  hash check, or one made by a session with capabilities (builtins,
  `:python`, `:git`, `:sqlite`, `:typescript`) this one lacks. Host mounts
  stay as they are (they are configuration), as with `restore/3`.
  """
  @spec checkout(t(), commit_id()) :: :ok | {:error, String.t()}
  def checkout(%__MODULE__{} = session, commit_id),
    do: ExBashkit.Session.History.checkout(session, commit_id)

  @doc """
  The session's history, newest first: its head and the commits it
  descends from, as `%{id, parents, meta, at}` (`at` a `DateTime`).

  Options: `:limit`, at most that many (default and bound: the commits a
  session keeps, `ExBashkit.Store.history_limit/0`, 100 unless configured).
  """
  @spec log(t(), [{:limit, pos_integer()}]) :: {:ok, [commit()]} | {:error, String.t()}
  def log(%__MODULE__{} = session, opts \\ []), do: ExBashkit.Session.History.log(session, opts)

  @doc """
  The paths created, modified and deleted (each list sorted) from commit
  `from_id` to commit `to_id`, or to the session's state now (`:current`,
  the default: that takes no commit and waits for a running script).
  Directories count as paths; a file whose mode changed is modified.
  """
  @spec diff(t(), commit_id(), commit_id() | :current) ::
          {:ok, %{created: [String.t()], modified: [String.t()], deleted: [String.t()]}}
          | {:error, String.t()}
  def diff(%__MODULE__{} = session, from_id, to_id \\ :current),
    do: ExBashkit.Session.History.diff(session, from_id, to_id)

  @doc """
  A new, independent session in the same state as `session`: built with
  the same options, in the same OS process (the same tenant), with its
  files, env, cwd, functions and aliases, its head and log (and, when
  durable, its recovery point). Nothing is committed: the fork's files
  share their bytes with the parent's until either side writes them (the
  first fork since the parent last changed copies them once; the next
  ones copy nothing). `commit: id` forks from an older state instead: a
  checkout of that commit.
  """
  @spec fork(t(), [{:commit, commit_id()}]) :: {:ok, t()} | {:error, String.t()}
  def fork(%__MODULE__{} = session, opts \\ []), do: ExBashkit.Session.History.fork(session, opts)

  # -- bang variants ------------------------------------------------------------
  #
  # Each raises the `%ExBashkit.Error{}` its structured call answers (the
  # reason set where the failure happened, never read from its message).

  @doc """
  Like `exec/3` (the answer of `run/3`), but returns the result or raises
  `ExBashkit.Error`.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> ExBashkit.Session.exec!(session, "echo hi").stdout
      "hi\\n"
  """
  @spec exec!(t(), String.t(), [exec_option()]) :: Result.t()
  def exec!(session, script, opts \\ []), do: bang!(run(session, script, opts))

  @doc """
  Like `read_file/2`, but returns the contents or raises `ExBashkit.Error`
  (`reason: :not_found` for a missing file).

  ## Examples

      iex> session = ExBashkit.Session.new(files: %{"/a" => "x"})
      iex> ExBashkit.Session.read_file!(session, "/a")
      "x"
  """
  @spec read_file!(t(), Path.t()) :: binary()
  def read_file!(session, path), do: bang!(Fs.read_file(session, path))

  @doc """
  Like `write_file/3`, but returns `:ok` or raises `ExBashkit.Error`.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> ExBashkit.Session.write_file!(session, "/b", "y")
      :ok
  """
  @spec write_file!(t(), Path.t(), iodata()) :: :ok
  def write_file!(session, path, content), do: bang!(Fs.write_file(session, path, content))

  @doc """
  Like `stat/2`, but returns the metadata or raises `ExBashkit.Error`
  (`reason: :not_found` for a missing path).

  ## Examples

      iex> session = ExBashkit.Session.new(files: %{"/a" => "xy"})
      iex> ExBashkit.Session.stat!(session, "/a")
      %{type: :file, size: 2}
  """
  @spec stat!(t(), Path.t()) :: %{type: fs_type(), size: non_neg_integer()}
  def stat!(session, path), do: bang!(Fs.stat(session, path))

  @doc """
  Like `list_dir/2`, but returns the entries or raises `ExBashkit.Error`.

  ## Examples

      iex> session = ExBashkit.Session.new(files: %{"/d/a" => "x"})
      iex> ExBashkit.Session.list_dir!(session, "/d")
      [{"a", :file}]
  """
  @spec list_dir!(t(), Path.t()) :: [{String.t(), fs_type()}]
  def list_dir!(session, path), do: bang!(Fs.list_dir(session, path))

  @doc """
  Like `state/2`, but returns the state or raises `ExBashkit.Error`.

  ## Examples

      iex> session = ExBashkit.Session.new(cwd: "/tmp")
      iex> ExBashkit.Session.state!(session).cwd
      "/tmp"
  """
  @spec state!(t(), [lifecycle_option()]) :: map()
  def state!(session, opts \\ []), do: bang!(ExBashkit.Session.Lifecycle.state(session, opts))

  @doc """
  Like `trash/1`, but returns the entries or raises `ExBashkit.Error`
  (`reason: :not_supported` without `:soft_delete`).

  ## Examples

      iex> session = ExBashkit.Session.new(soft_delete: true)
      iex> ExBashkit.Session.trash!(session)
      []
  """
  @spec trash!(t()) :: [trash_entry()]
  def trash!(session), do: bang!(Trash.trash(session))

  @doc """
  Like `undelete/2`, but returns `:ok` or raises `ExBashkit.Error`
  (`reason: :not_found`, `:exists` or `:not_supported`).

  ## Examples

      iex> session = ExBashkit.Session.new(soft_delete: true)
      iex> error = catch_error(ExBashkit.Session.undelete!(session, "/never"))
      iex> error.reason
      :not_found
  """
  @spec undelete!(t(), Path.t()) :: :ok
  def undelete!(session, original_path), do: bang!(Trash.undelete(session, original_path))

  @doc """
  Like `snapshot/2`, but returns the bytes or raises `ExBashkit.Error`.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> is_binary(ExBashkit.Session.snapshot!(session))
      true
  """
  @spec snapshot!(t(), [snapshot_option()]) :: binary()
  def snapshot!(session, opts \\ []), do: bang!(ExBashkit.Session.Snapshot.take(session, opts))

  @doc """
  Like `restore/3`, but returns the session or raises `ExBashkit.Error`.

  ## Examples

      iex> bytes = ExBashkit.Session.snapshot!(ExBashkit.Session.new(env: [A: "1"]))
      iex> session = ExBashkit.Session.restore!(ExBashkit.Session.new(), bytes)
      iex> ExBashkit.Session.exec!(session, "echo $A").stdout
      "1\\n"
  """
  @spec restore!(t(), binary(), [{:key, binary()} | lifecycle_option()]) :: t()
  def restore!(session, bytes, opts \\ []), do: bang!(restore_session(session, bytes, opts))

  defp bang!(answer) do
    case Error.structured(answer) do
      :ok -> :ok
      {:ok, value} -> value
      {:error, error} -> raise error
    end
  end

  @doc false
  # A call's first argument that is not a session: the programmer's error.
  @spec not_a_session!(term(), String.t()) :: no_return()
  def not_a_session!(other, fun) do
    raise ArgumentError,
          "ExBashkit.Session.#{fun}: the first argument must be a session from new/1, got: " <>
            inspect(other, limit: 5)
  end
end
