defmodule ExBashkit.Build.Download do
  @moduledoc """
  HTTP(S) GET with OTP only (`:httpc`, `:ssl`, `:public_key`): no Hex
  package is needed to fetch a precompiled artifact.

  - HTTPS verifies the server against the OS trust store
    (`:public_key.cacerts_get/0`, or `EX_BASHKIT_CACERTFILE`) and checks the
    host name; redirects are followed (GitHub release downloads redirect).
  - `HTTPS_PROXY` / `HTTP_PROXY` are honoured, except for loopback hosts and
    those in `NO_PROXY`.
  - It runs in its own `:httpc` profile so that it changes no settings of the
    default one.
  """

  @profile :ex_bashkit_build

  @doc """
  Fetches `url`. `{:error, reason}` says why in words: the HTTP status, or
  why no answer came.
  """
  @spec get(String.t()) :: {:ok, binary()} | {:error, String.t()}
  def get(url) do
    with :ok <- start(),
         {:ok, http_opts} <- http_options(url) do
      request = {String.to_charlist(url), [{~c"user-agent", ~c"ex_bashkit-build"}]}

      case :httpc.request(:get, request, http_opts, [body_format: :binary], @profile) do
        {:ok, {{_, 200, _}, _headers, body}} -> {:ok, body}
        {:ok, {{_, status, reason}, _, _}} -> {:error, "HTTP #{status} #{reason}"}
        {:error, reason} -> {:error, describe(reason)}
      end
    end
  end

  defp start do
    with {:ok, _} <- Application.ensure_all_started(:inets),
         {:ok, _} <- Application.ensure_all_started(:ssl) do
      case :inets.start(:httpc, profile: @profile) do
        {:ok, _} -> set_proxies()
        {:error, {:already_started, _}} -> :ok
        {:error, reason} -> {:error, "cannot start :httpc: #{inspect(reason)}"}
      end
    else
      {:error, reason} -> {:error, "cannot start :inets/:ssl: #{inspect(reason)}"}
    end
  end

  defp set_proxies do
    no_proxy =
      ["localhost", "127.0.0.1", "::1"] ++
        String.split(env("NO_PROXY") || "", ",", trim: true)

    no_proxy = Enum.map(no_proxy, &String.to_charlist(String.trim(&1)))

    opts =
      for {key, var} <- [proxy: "HTTP_PROXY", https_proxy: "HTTPS_PROXY"],
          proxy = env(var),
          %URI{host: host, port: port} when is_binary(host) <- [URI.parse(proxy)],
          do: {key, {{String.to_charlist(host), port}, no_proxy}}

    :httpc.set_options(opts, @profile)
  end

  defp env(name), do: System.get_env(name) || System.get_env(String.downcase(name))

  defp http_options(url) do
    base = [timeout: 300_000, connect_timeout: 15_000, autoredirect: true]

    if String.starts_with?(url, "https:") do
      with {:ok, cacerts} <- cacerts() do
        {:ok,
         [
           ssl:
             [
               verify: :verify_peer,
               depth: 4,
               customize_hostname_check: [
                 match_fun: :public_key.pkix_verify_hostname_match_fun(:https)
               ]
             ] ++ cacerts
         ] ++ base}
      end
    else
      {:ok, base}
    end
  end

  defp cacerts do
    case System.get_env("EX_BASHKIT_CACERTFILE") do
      nil ->
        try do
          {:ok, [cacerts: :public_key.cacerts_get()]}
        rescue
          e ->
            {:error,
             "no CA certificates found (#{Exception.message(e)}): set EX_BASHKIT_CACERTFILE to a PEM bundle"}
        end

      file ->
        {:ok, [cacertfile: String.to_charlist(file)]}
    end
  end

  defp describe({:failed_connect, details}) do
    reason =
      Enum.find_value(details, :unknown, fn
        {:inet, _, reason} -> reason
        _ -> nil
      end)

    text =
      case reason do
        {:tls_alert, {kind, message}} -> "TLS #{kind}: #{message |> to_string() |> String.trim()}"
        reason when is_atom(reason) -> :inet.format_error(reason)
        reason -> inspect(reason)
      end

    "cannot connect (#{text})"
  end

  defp describe(:timeout), do: "timed out"
  defp describe(reason), do: inspect(reason)
end
