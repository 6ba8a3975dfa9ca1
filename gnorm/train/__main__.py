from gnorm.train.command import cli

if __name__ == '__main__':
    cli()
